"""Our FedMeta Table 2 cells beside the paper's, in the paper's layout.

FedMeta (Chen et al. 2018, `../shared/papers/000_*.txt`) Table 2: test
accuracy in percent, mean ± std over runs, after 2,000 rounds (FEMNIST) or 400
(Shakespeare, Sent140), for four methods at 20%, 50% and 90% support. The
paper's rows are datasets × methods and its columns the support fractions;
`table` writes ours and the paper's side by side in that layout, for the runs
whose dataset and model are the paper's (`PAPER_MODELS`) at one of its
support fractions. Other settings are left to the report's own tables.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from tff_meta.analysis.tables import markdown_table, mean_pm_std, pct

# Our dataset names -> the paper's, and the paper's model for each.
DATASETS = {'emnist': 'FEMNIST', 'leaf_femnist': 'FEMNIST', 'shakespeare': 'Shakespeare',
            'leaf_shakespeare': 'Shakespeare', 'leaf_sent140': 'Sent140'}
PAPER_MODELS = {'FEMNIST': 'femnist_cnn', 'Shakespeare': 'shakespeare_lstm',
                'Sent140': 'sent140_lstm'}
SUPPORTS = (0.2, 0.5, 0.9)
METHODS = ('fedavg', 'fedavg_meta', 'fedmeta_maml', 'fedmeta_metasgd')

# Table 2, (mean, std) per support fraction 20% / 50% / 90%.
TABLE2 = {
    ('FEMNIST', 'fedavg'): ((76.79, 0.45), (75.44, 0.73), (77.05, 1.43)),
    ('FEMNIST', 'fedavg_meta'): ((83.58, 0.13), (87.84, 0.11), (88.76, 0.78)),
    ('FEMNIST', 'fedmeta_maml'): ((88.46, 0.25), (89.77, 0.08), (89.31, 0.15)),
    ('FEMNIST', 'fedmeta_metasgd'): ((89.26, 0.12), (90.28, 0.02), (89.31, 0.09)),
    ('Shakespeare', 'fedavg'): ((40.76, 0.62), (42.01, 0.43), (40.58, 0.55)),
    ('Shakespeare', 'fedavg_meta'): ((38.71, 0.51), (42.97, 0.97), (43.48, 0.64)),
    ('Shakespeare', 'fedmeta_maml'): ((46.06, 0.85), (46.29, 0.84), (46.49, 0.77)),
    ('Shakespeare', 'fedmeta_metasgd'): ((44.72, 0.72), (45.24, 0.53), (46.25, 0.63)),
    ('Sent140', 'fedavg'): ((71.53, 0.18), (72.29, 0.49), (73.38, 0.38)),
    ('Sent140', 'fedavg_meta'): ((70.10, 0.66), (73.88, 0.06), (75.86, 0.46)),
    ('Sent140', 'fedmeta_maml'): ((76.37, 0.06), (78.63, 0.19), (79.53, 0.25)),
    ('Sent140', 'fedmeta_metasgd'): ((77.24, 0.32), (79.38, 0.09), (80.94, 0.29)),
}
DISPLAY = {'fedavg': 'FedAvg', 'fedavg_meta': 'FedAvg(Meta)', 'fedmeta_maml': 'FedMeta(MAML)',
           'fedmeta_metasgd': 'FedMeta(Meta-SGD)'}
EXPLANATION = (
    'Ours: accuracy over all query points of the test clients after the last round, mean ± '
    'std over our runs (their count in parentheses); the paper: FedMeta Table 2, mean ± std '
    'over its runs. Only runs of the paper\'s dataset and model at 20%, 50% or 90% support '
    'are placed here; "—" is a cell with no finished run. Where a cell has variants (runs '
    'whose configs differ in more than the seed), the one with the most runs is shown, '
    'named by its keys.')


def _paper_key(group):
  """(paper dataset, support index) of a group, or None when the paper has no such cell."""
  dataset = DATASETS.get(group.setting.dataset)
  if dataset is None or group.setting.model != PAPER_MODELS[dataset]:
    return None
  for k, support in enumerate(SUPPORTS):
    if abs(group.setting.support_fraction - support) < 1e-9:
      return dataset, k
  return None


def table(groups: Sequence[Any], rows: Sequence[Dict[str, Any]]) -> Optional[str]:
  """The Markdown table, or None when no group is a cell of the paper's table."""
  chosen: Dict[tuple, tuple] = {}
  for group, row in zip(groups, rows):
    key = _paper_key(group)
    if key is None or group.algorithm not in METHODS:
      continue
    cell = (*key, group.algorithm)
    if cell not in chosen or len(group.runs) > len(chosen[cell][0].runs):
      chosen[cell] = (group, row)
  if not chosen:
    return None

  def ours(dataset, k, algorithm):
    if (dataset, k, algorithm) not in chosen:
      return '—'
    group, row = chosen[(dataset, k, algorithm)]
    variant = group.method.partition(' [')[2].rstrip(']')
    return (f"{mean_pm_std(row['accuracy'], row['accuracy_std'], row['runs'], pct)} "
            f"({row['runs']})" + (f' [{variant}]' if variant else ''))

  header = ['Dataset', 'Method']
  for support in SUPPORTS:
    header += [f'{support:.0%} support: ours', 'paper']
  body = []
  for dataset in dict.fromkeys(DATASETS.values()):
    if not any(d == dataset for d, _, _ in chosen):
      continue
    for algorithm in METHODS:
      line = [dataset, DISPLAY[algorithm]]
      for k in range(len(SUPPORTS)):
        mean, std = TABLE2[(dataset, algorithm)][k]
        line += [ours(dataset, k, algorithm), f'{mean:.2f} ± {std:.2f}']
      body.append(line)
  return markdown_table(header, body)
