"""Result tables (Markdown) and convergence plots (PNG)."""

from __future__ import annotations

import os
from typing import Dict, List, Sequence

COLUMNS = (
    ('method', 'Method', '{}'),
    ('accuracy', 'Accuracy % (all query points)', '{:.2f}'),
    ('accuracy_std', '± across runs', '{:.2f}'),
    ('client_mean', 'Client mean %', '{:.2f}'),
    ('client_std', 'Client std %', '{:.2f}'),
    ('rounds', 'Rounds', '{:d}'),
    ('mb_sent', 'MB sent (up+down)', '{:.2f}'),
    ('train_seconds', 'Train s', '{:.1f}'),
)


def format_table(rows: Sequence[Dict]) -> str:
  columns = [c for c in COLUMNS if any(c[0] in r for r in rows)]
  header = '| ' + ' | '.join(title for _, title, _ in columns) + ' |'
  rule = '|' + '|'.join('---' for _ in columns) + '|'
  body = ['| ' + ' | '.join(fmt.format(int(r[k]) if fmt == '{:d}' else r[k])
                            for k, _, fmt in columns) + ' |' for r in rows]
  return '\n'.join([header, rule, *body])


def write_csv(rows: Sequence[Dict], path: str) -> None:
  import pandas as pd  # pylint: disable=g-import-not-at-top
  pd.DataFrame(list(rows)).to_csv(path, index=False)


def plot_convergence(histories: Dict[str, List[Dict[str, float]]], path: str, title: str = '') -> None:
  """Test accuracy (all query points) against rounds, one line per method."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for method, history in histories.items():
    rounds = [h['round'] for h in history if 'test_accuracy' in h]
    acc = [100 * h['test_accuracy'] for h in history if 'test_accuracy' in h]
    ax.plot(rounds, acc, marker='o', markersize=3, label=method)
  ax.set_xlabel('communication round')
  ax.set_ylabel('test accuracy on query sets (%)')
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  fig.savefig(path, dpi=120)
  plt.close(fig)
