"""Our FedMeta Table 2 cells beside the paper's, in the paper's layout.

FedMeta (Chen et al. 2018, "Federated Meta-Learning with Fast Convergence and Efficient Communication") Table 2: test
accuracy in percent, mean ± std over runs, after 2,000 rounds (FEMNIST) or 400
(Shakespeare, Sent140), for four methods at 20%, 50% and 90% support. The
paper's rows are datasets × methods and its columns the support fractions;
`table` writes ours and the paper's side by side in that layout, for the runs
whose dataset and model are the paper's (`PAPER_MODELS`) at one of its
support fractions. Other settings are left to the report's own tables.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence

from tff_meta.core import config_file
from tff_meta.core.tables import markdown_table, mean_pm_std, pct

# Our dataset names -> the paper's, and the paper's model for each.
DATASETS = {'emnist': 'FEMNIST', 'leaf_femnist': 'FEMNIST', 'shakespeare': 'Shakespeare',
            'leaf_shakespeare': 'Shakespeare', 'leaf_sent140': 'Sent140'}
PAPER_MODELS = {'FEMNIST': 'femnist_cnn', 'Shakespeare': 'shakespeare_lstm',
                'Sent140': 'sent140_lstm'}
SUPPORTS = (0.2, 0.5, 0.9)
# The paper's Table 2 as printed, the file `programs.reproduce` reads too:
# [dataset] method = { p20 = [mean, std], p50 = ..., p90 = ... }.
PAPER_FILE = os.path.join(config_file.shipped_configs_folder(), 'fedmeta', 'paper_table2.toml')
# Our algorithm -> its key in PAPER_FILE.
PAPER_KEYS = {'fedavg': 'fedavg', 'fedavg_meta': 'fedavg_meta', 'fedmeta_maml': 'maml',
              'fedmeta_metasgd': 'metasgd'}
METHODS = tuple(PAPER_KEYS)   # Table 2's rows, in its order
# Table 2's row labels as the paper prints them.
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
  paper = config_file.load_toml(PAPER_FILE, see='configs/fedmeta/paper_table2.toml in the '
                                'repository')

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
        mean, std = paper[dataset.lower()][PAPER_KEYS[algorithm]][f'p{round(100 * SUPPORTS[k])}']
        line += [ours(dataset, k, algorithm), f'{mean:.2f} ± {std:.2f}']
      body.append(line)
  return markdown_table(header, body)
