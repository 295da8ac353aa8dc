"""The one-row-per-run summary of classification runs, in Markdown.

`format_table` writes the summary that `programs.train` and `programs.compare`
print (`RunResult.row()`): the `COLUMNS` that some row has; `paired_cell` is the
paired difference against FedAvg (`groups.paired_difference`'s keys).
`seed_std` is the "±" over seeds of every table (sample std, ddof = 1).
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

import numpy as np

from tff_meta.core.tables import markdown_table


def paired_cell(row: Dict[str, Any]) -> str:
  """'+d ± ci (n clients, k seed(s))' of `groups.paired_difference`'s keys in `row`; '—' without."""
  if 'vs_reference' not in row:
    return '—'
  return (f"{row['vs_reference']:+.2f} ± {row['vs_reference_ci95']:.2f} "
          f"({row['vs_reference_clients']} clients, {row['vs_reference_seeds']} seed(s))")


# (row key, title, format string of row[key] or a function of the whole row)
COLUMNS = (
    ('method', 'Method', '{}'),
    ('accuracy', 'Accuracy % (all query points)', '{:.2f}'),
    ('accuracy_std', '± across runs', '{:.2f}'),
    ('known_accuracy', 'Known clients % (held-out local data)', '{:.2f}'),   # report 003
    ('client_mean', 'Client mean %', '{:.2f}'),
    ('client_std', 'Client std %', '{:.2f}'),
    ('rounds', 'Rounds', '{:d}'),
    ('mb_sent', 'MB sent (up+down)', '{:.2f}'),
    ('vs_reference', 'vs FedAvg, same test clients (95% CI)', paired_cell),   # compare
    ('train_seconds', 'Train s', '{:.1f}'),
    ('epsilon', 'ε (DP)', '{:.2f}'),   # only for DP runs
)


def format_table(rows: Sequence[Dict]) -> str:
  """The run summary: the COLUMNS that some row has, one line per run."""
  columns = [c for c in COLUMNS if any(c[0] in r for r in rows)]
  return markdown_table(
      [title for _, title, _ in columns],
      [[_cell(r, k, fmt) for k, _, fmt in columns] for r in rows])


def _cell(row: Dict, key: str, fmt) -> str:
  if callable(fmt):
    return fmt(row)
  if key not in row:
    return '—'
  return fmt.format(int(row[key]) if fmt == '{:d}' else row[key])


def seed_std(values: Sequence[float]) -> float:
  """The spread over seeds (runs) that every table of the project prints after "±": the sample
  standard deviation (ddof = 1); 0.0 for one value, which tables print without a "±"."""
  arr = np.asarray(values, np.float64)
  return float(arr.std(ddof=1)) if arr.size > 1 else 0.0
