"""analysis/paper_table.py: our cells beside FedMeta Table 2, in its layout."""

import types

from tff_meta.analysis import paper_table
from tff_meta.core.run_folder import Setting


def _group(algorithm, method, runs, dataset='emnist', model='femnist_cnn', support=0.2):
  return types.SimpleNamespace(setting=Setting(dataset, model, support), algorithm=algorithm,
                               method=method, runs=[object()] * runs)


def _row(accuracy, std, runs):
  return dict(accuracy=accuracy, accuracy_std=std, runs=runs)


def test_cells_land_under_their_support_beside_the_papers():
  groups = [_group('fedmeta_maml', 'FedMeta(MAML)', 2), _group('fedavg', 'FedAvg', 1, support=0.9),
            _group('fedmeta_fomaml', 'FedMeta(FOMAML)', 1)]   # not in Table 2: left out
  rows = [_row(83.594, 0.871, 2), _row(70.0, 0.0, 1), _row(83.94, 0.0, 1)]
  lines = paper_table.table(groups, rows).splitlines()
  assert lines[0] == ('| Dataset | Method | 20% support: ours | paper | 50% support: ours | paper '
                      '| 90% support: ours | paper |')
  assert len(lines) == 2 + 4   # FEMNIST's four methods; no other dataset
  assert lines[2] == ('| FEMNIST | FedAvg | — | 76.79 ± 0.45 | — | 75.44 ± 0.73 | 70.00 (1) '
                      '| 77.05 ± 1.43 |')
  assert lines[4].startswith('| FEMNIST | FedMeta(MAML) | 83.59 ± 0.87 (2) | 88.46 ± 0.25 | — |')


def test_variants_show_the_one_with_most_runs_and_other_settings_none():
  groups = [_group('fedmeta_maml', 'FedMeta(MAML) [weighting=uniform]', 1),
            _group('fedmeta_maml', 'FedMeta(MAML) [weighting=num_examples]', 3)]
  rows = [_row(80.0, 0.0, 1), _row(84.0, 1.0, 3)]
  text = paper_table.table(groups, rows)
  assert '84.00 ± 1.00 (3) [weighting=num_examples]' in text and '80.00' not in text
  assert paper_table.table([_group('fedavg', 'FedAvg', 1, model='mlp')], [_row(1, 0, 1)]) is None
  assert paper_table.table([_group('fedavg', 'FedAvg', 1, support=0.3)], [_row(1, 0, 1)]) is None
  assert paper_table.table([_group('fedavg', 'FedAvg', 1, dataset='digits')], [_row(1, 0, 1)]) is None
