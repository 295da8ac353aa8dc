"""tff_meta/analysis/table2.py and table2_figures.py: FedMeta Table 2's blocks and figures
from a generated folder of the queue's layout, checked against hand computation."""

import json
import os

import numpy as np
import pytest
from scipy import stats

from tff_meta.analysis import figures, results_page, table2, table2_figures

ROUNDS, EVERY = 1000, 100
CODE = 'abcdef0123456789'
# (support, label) -> accuracy (fraction) per seed: the cells' "all query points" accuracy.
ACCURACY = {
    (20, 'FedAvg'): [0.70, 0.72, 0.74], (20, 'FedAvg(Meta)'): [0.80, 0.81, 0.82],
    (20, 'FedMeta(MAML)'): [0.84, 0.86, 0.88], (20, 'FedMeta(FOMAML)'): [0.83, 0.84, 0.85],
    (20, 'FedMeta(Meta-SGD)'): [0.85, 0.85, 0.88],
    (50, 'FedAvg'): [0.71, 0.71, 0.71], (50, 'FedAvg(Meta)'): [0.87, 0.88, 0.89],
    (50, 'FedMeta(MAML)'): [0.86, 0.87, 0.88], (50, 'FedMeta(Meta-SGD)'): [0.89, 0.89, 0.89],
    (90, 'FedAvg'): [0.70, 0.71, 0.72], (90, 'FedAvg(Meta)'): [0.75, 0.76, 0.77],
    (90, 'FedMeta(MAML)'): [0.80, 0.81, 0.82], (90, 'FedMeta(Meta-SGD)'): [0.88, 0.90],
}
REFERENCE = [[0.8, 0.7, 0.9, 0.6], [0.7, 0.7, 0.8, 0.5], [0.9, 0.6, 0.7, 0.8]]   # per seed
MAML_20 = [[2, 4, 0, 6], [1, 3, 5, 3], [-2, 4, 2, 0]]   # MAML − FedAvg(Meta) per writer, points
# method -> per seed, the first evaluation round at >= 74% test accuracy (None: never).
REACH = {'fedavg': [300, 400, 500], 'maml': [200, 200, 300], 'fomaml': [None] * 3,
         'metasgd': [100, 100, None]}
SLOPES = {'metasgd': [1e-5, 2e-5, 3e-5], 'maml': [0.0, 1e-5, -1e-5]}   # validation, per round


def _client_accuracies(support, label, seed):
  ref = np.asarray(REFERENCE[seed])
  if support == 20 and label == 'FedMeta(MAML)':
    return ref + np.asarray(MAML_20[seed]) / 100
  return ref + {'FedAvg': -0.05, 'FedAvg(Meta)': 0.0}.get(label, 0.01)


def _run(root, support, method, seed):
  folder = root / f'table2_femnist_p{support}_{method}_seed{seed}'
  folder.mkdir()
  (folder / 'config.toml').write_text(
      f'algorithm = "{method}"\ndataset = "emnist"\nmodel = "femnist_cnn"\n'
      f'support_fraction = {support / 100}\nseed = {seed}\n')
  reach = REACH[method][seed] if support == 20 else None
  slope = SLOPES.get(method, [0.0] * 3)[seed]
  rows = []
  for r in range(0, ROUNDS + 1, EVERY):
    test = 0.75 if reach is not None and r >= reach else 0.5
    validation = 0.3 + 4e-4 * min(r, 500) + slope * max(r - 500, 0)   # steep, then `slope`
    rows.append(dict(round=r, test_accuracy=test, validation_accuracy=validation))
  (folder / 'eval.csv').write_text('round,test_accuracy,validation_accuracy\n' + ''.join(
      f"{h['round']},{h['test_accuracy']},{h['validation_accuracy']}\n" for h in rows))
  (folder / 'metrics.csv').write_text('round,bytes_down,bytes_up,client_flops\n' + ''.join(
      f'{k},{2_000_000},{1_000_000 * k},{1e9 * (1 + seed)}\n' for k in range(1, ROUNDS + 1)))
  (folder / 'results.json').write_text(json.dumps(
      {'summary': {'method': method, 'accuracy': 0.5}, 'history': rows,
       'test_client_accuracies': [0.5]}))
  versions = [CODE] + (['1234567aaaa'] if (method, seed) == ('metasgd', 2) else [])
  (folder / 'provenance.csv').write_text('time,code_version,start,command,machine\n' + ''.join(
      f't,{v},0,c,m\n' for v in versions))
  return folder.name


def _score(root, support, name, seed, labels):
  folder = root / 'scores' / f'p{support}'
  folder.mkdir(parents=True, exist_ok=True)
  rows = [dict(label=label, accuracy=ACCURACY[(support, label)][seed],
               client_ids=[f'w{seed}_{i}' for i in range(4)],
               client_accuracies=list(_client_accuracies(support, label, seed)))
          for label in labels]
  (folder / f'{name}.json').write_text(json.dumps(
      {'seed': seed, 'split': 'test', 'support_fraction': support / 100, 'rows': rows}))


@pytest.fixture(scope='module')
def root(tmp_path_factory):
  """The queue's layout: FedAvg trained at 20% and scored both ways at every support; MAML
  and Meta-SGD at every support, FOMAML at 20%; Meta-SGD at 90% on seeds 0 and 1 only."""
  root = tmp_path_factory.mktemp('fedmeta_308')
  for seed in range(3):
    name = _run(root, 20, 'fedavg', seed)
    for s in table2.SUPPORTS:
      _score(root, s, name, seed, ['FedAvg', 'FedAvg(Meta)'])
    for method, label, supports in (('maml', 'FedMeta(MAML)', (20, 50, 90)),
                                    ('fomaml', 'FedMeta(FOMAML)', (20,)),
                                    ('metasgd', 'FedMeta(Meta-SGD)', (20, 50, 90))):
      for s in supports:
        if len(ACCURACY[(s, label)]) > seed:
          _score(root, s, _run(root, s, method, seed), seed, [label])
  return str(root)


def _cells(markdown):
  return {line.split(' | ')[0].strip('| '): [c.strip() for c in line.strip('|\n').split('|')]
          for line in markdown.splitlines() if line.startswith('| ') and ' | ' in line}


def test_table_is_the_mean_and_sample_std_of_the_seeds(root):
  text = table2.table_markdown(root)
  cells = _cells(text)
  # 20%: FedAvg 70, 72, 74 -> 72.00 ± 2.00 (ddof = 1); Meta-SGD 85, 85, 88 -> sqrt(3).
  assert cells['FedAvg'][1:3] == ['72.00 ± 2.00 (n = 3)', '76.79 ± 0.45']
  assert cells['FedAvg(Meta)'][1] == '81.00 ± 1.00 (n = 3)'
  assert cells['FedMeta(Meta-SGD)'][1] == '86.00 ± 1.73 (n = 3)'
  assert cells['FedAvg'][3] == '71.00 ± 0.00 (n = 3)'
  assert cells['FedMeta(Meta-SGD)'][5:7] == ['89.00 ± 1.41 (only 2 seeds: 0, 1)', '89.31 ± 0.09']
  assert cells['FedMeta(FOMAML)'][1:5] == ['84.00 ± 1.00 (n = 3)', '—', 'not in the plan', '—']
  # FedAvg(Meta) is FedAvg's runs scored again: the same commits. Meta-SGD seed 2 (20% and
  # 50%; no 90% run) was resumed under a newer commit: 2 of its 8 folders.
  assert cells['FedAvg'][-1] == cells['FedAvg(Meta)'][-1] == 'abcdef0'
  assert cells['FedMeta(Meta-SGD)'][-1] == ('abcdef0, 1234567 (resumed under a newer commit: '
                                            '2 of 8 folders)')
  assert 'one training per seed' in text and 'ddof = 1' in text


def test_a_missing_cell_says_so(root, tmp_path):
  os.symlink(os.path.join(root, 'table2_femnist_p20_fedavg_seed0'),
             tmp_path / 'table2_femnist_p20_fedavg_seed0')
  cells = _cells(table2.table_markdown(str(tmp_path)))
  assert cells['FedAvg'][1] == 'missing: no scores' and cells['FedAvg'][-1] == 'abcdef0'
  assert cells['FedMeta(MAML)'][1] == 'missing: no scores'
  assert cells['FedMeta(MAML)'][-1] == 'no run folder'


def test_paired_differences_and_their_t_interval(root):
  cells = _cells(table2.paired_markdown(root))
  d = np.asarray(MAML_20, float).ravel()   # 12 writer-seeds
  half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
  assert cells['FedMeta(MAML)'][1] == f'+{d.mean():.2f} ± {half:.2f} (4 × 3)'
  assert cells['FedMeta(MAML)'][1] == '+2.33 ± 1.47 (4 × 3)'
  assert cells['FedAvg'][1] == '−5.00 ± 0.00 (4 × 3)'
  assert cells['FedMeta(Meta-SGD)'][3] == '+1.00 ± 0.00 (4 × 2)'   # seeds 0 and 1 pair
  assert cells['FedMeta(FOMAML)'][2:] == ['—', '—']
  assert 'FedAvg(Meta)' not in cells


def test_targets_met_not_met_and_not_decided(root):
  order = [r for r in table2.targets(root) if r['target'].startswith('FedAvg <')]
  assert [r['met'] for r in order] == [True, False, None]
  assert order[0]['measured'] == '72.00 < 81.00 < 86.00 and 86.00'
  assert order[1]['why'] == 'FedMeta(MAML) is 1.00 below FedAvg(Meta)'
  assert order[2]['why'] == 'FedMeta(Meta-SGD) has 2 seeds'
  ci = next(r for r in table2.targets(root) if 'CI above 0' in r['target'])
  assert ci['met'] is True and ci['measured'] == '+2.33 ± 1.47 (CI from 0.87)'
  meta = {(r['target'].split(' ')[0], r['column']): r for r in table2.targets(root)
          if '≥' in r['target']}
  assert meta[('FedMeta(MAML)', 20)]['met'] is True   # 86.00 >= 88.46 - 3
  assert meta[('FedMeta(MAML)', 50)]['met'] is True   # 87.00 >= 86.77
  # Meta-SGD 20%: 86.00 < 89.26 - 3 = 86.26: 0.26 short; validation slopes over rounds
  # 500-1000 of 1e-5, 2e-5, 3e-5 a round: +0.10, +0.20, +0.30 points per 100 rounds.
  r = meta[('FedMeta(Meta-SGD)', 20)]
  assert r['met'] is False and r['why'].startswith('0.26 short; validation accuracy over the '
                                                   'last 500 rounds: +0.20 points per 100 rounds')
  r = meta[('FedMeta(MAML)', 90)]   # 81.00 < 86.31; slopes 0, +0.1, −0.1
  assert r['met'] is False and r['why'].startswith('5.31 short; validation accuracy over the '
                                                   'last 500 rounds: +0.00 points')
  assert meta[('FedMeta(Meta-SGD)', 90)]['met'] is None
  text = table2.targets_markdown(root)
  assert 'not met: 0.26 short' in text and 'not decided: FedMeta(Meta-SGD) has 2 seeds' in text


def test_validation_slope_is_the_last_rounds_least_squares(root):
  folder = os.path.join(root, 'table2_femnist_p20_metasgd_seed0')
  assert table2.validation_slope([folder]) == pytest.approx(0.1)
  assert table2.validation_slope([folder], last=1000) > 1   # the steep first half counts


def _mb(k):
  """MB down + up of rounds 1..k: 2 MB down and k MB up in round k."""
  return 2 * k + k * (k + 1) / 2


def test_cost_to_74_percent(root):
  cost = {r['method']: r['seeds'] for r in table2.cost(root)}
  assert 'FedAvg(Meta)' not in cost
  # FedAvg seed 1 reaches 74% at round 400: bytes 2e6 * 400 + 1e6 * (1 + ... + 400), FLOPs
  # 2e9 a round (seed 1).
  assert cost['FedAvg'][1] == dict(rounds=400, bytes=2e6 * 400 + 1e6 * 400 * 401 / 2,
                                   flops=2e9 * 400)
  assert cost['FedMeta(FOMAML)'] == {0: None, 1: None, 2: None}
  cells = _cells(table2.cost_markdown(root))
  mb = [_mb(k) for k in (300, 400, 500)]   # seeds 0, 1, 2
  assert cells['FedAvg'][1:] == ['3 of 3', '400 ± 100',
                                 f'{np.mean(mb):.0f} ± {np.std(mb, ddof=1):.0f}', '867 ± 603']
  assert cells['FedMeta(FOMAML)'][1:] == ['0 of 3'] + ['not reached'] * 3
  assert cells['FedMeta(Meta-SGD)'][1:3] == ['2 of 3 (seeds 0, 1)', '100 ± 0']


def test_figures_plot_the_runs(root, tmp_path):
  table2_figures.plot_cost(root, str(tmp_path / 'cost.png'))
  mb, gflops = figures.read_picture_data(str(tmp_path / 'cost.png'))['panels']
  assert mb['bars'] == [pytest.approx(np.mean([_mb(k) for k in reach]), rel=1e-5) if reach else None
                        for reach in ([300, 400, 500], [200, 200, 300], [], [100, 100])]
  assert gflops['bars'][0] == pytest.approx(np.mean([300, 800, 1500]), rel=1e-5)
  table2_figures.plot_curves(root, str(tmp_path / 'curves.png'))
  panels = figures.read_picture_data(str(tmp_path / 'curves.png'))['panels']
  assert len(panels) == 9
  test20 = {line['label']: line for line in panels[0]['lines']}
  fedavg = test20['FedAvg (3 seeds)']   # reaching 0.75 at rounds 300, 400, 500
  assert fedavg['x'][:7] == [0, 100, 200, 300, 400, 500, 600]
  assert fedavg['y'][:7] == pytest.approx([50, 50, 50, 50 + 25 / 3, 50 + 50 / 3, 75, 75])
  assert 'FedAvg (3 seeds; its 20% run)' in [line['label'] for line in panels[3]['lines']]
  writers = [line['label'] for line in panels[2]['lines']]
  assert writers[1] == 'FedAvg(Meta): mean 72.5 (12 writers of 3 seeds)'   # REFERENCE's mean


def test_results_page_fills_the_blocks(root, tmp_path):
  png = str(tmp_path / 'fig' / 'cost.png')
  text = ''.join(f'<!-- block {kind}: {root} -->\nold\n<!-- /block -->\n'
                 for kind in table2.BLOCKS)
  text += f'<!-- block figure: table2_cost {root} {png} -->\nold\n<!-- /block -->\n'
  written = results_page.write(text, draw=True, page=str(tmp_path / 'page.md'))
  assert table2.table_markdown(root) in written and table2.cost_markdown(root) in written
  assert '![table2_cost](fig/cost.png)' in written and os.path.exists(png)
  assert all(w == c for _, w, c in results_page.blocks(written, page=str(tmp_path / 'page.md')))
  assert not results_page.stale_figures(written)


def test_a_folder_that_is_not_there_is_one_error(tmp_path, capsys):
  assert table2.main([str(tmp_path / 'none')]) == 1
  assert capsys.readouterr().err.startswith('error: ')
