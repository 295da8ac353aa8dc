"""Markdown and CSV tables of results.

`markdown_table` is the one Markdown table writer: the report's tables
(`analysis.report`, in the layout of FedMeta Table 2), the run summary below,
the tables `programs.reproduce`, `programs.sweep` and `programs.sweep`
print, few-round's results.md (`fewround.experiment`), the recommendation
tables (`recommendation.movielens_task`, `service_task`, `calibration`), the
README's catalog (`tff_meta.catalog`) and the benchmarks' headers all go
through it.
`format_table` and `write_csv` write the one-row-per-run summary of
`programs.train` and `programs.compare` (`RunResult.row()`).
`seed_std` is the "±" over seeds of every table (sample std, ddof = 1).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

from tff_meta.core.files import atomic_open


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


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  """A Markdown table: `| a | b |`, a `|---|---|` rule, then one line per row (cells str())."""
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '|'.join('---' for _ in header) + '|']
  lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
  return '\n'.join(lines)


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


def write_csv(rows: Sequence[Dict], path: str) -> None:
  """`rows` as a CSV with a header (the union of their keys, in order), written atomically."""
  import pandas as pd  # pylint: disable=g-import-not-at-top
  with atomic_open(path, 'w', newline='') as f:
    pd.DataFrame(list(rows)).to_csv(f, index=False)


def seed_std(values: Sequence[float]) -> float:
  """The spread over seeds (runs) that every table of the project prints after "±": the sample
  standard deviation (ddof = 1); 0.0 for one value, which tables print without a "±"."""
  arr = np.asarray(values, np.float64)
  return float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def num(x: float) -> str:
  """A cost for a table: thousands separated above 1,000, else 4 significant digits."""
  return f'{x:,.0f}' if abs(x) >= 1000 else f'{x:.4g}'


def mean_pm_std(mean: float, std: float, n: int, fmt=num) -> str:
  """'mean ± std', or just the mean when it is of one value (n = 1)."""
  return fmt(mean) + (f' ± {fmt(std)}' if n > 1 else '')


def pct(x: float) -> str:
  """A percentage for a table: two decimals."""
  return f'{x:.2f}'


def pct_label(target: Optional[float]) -> str:
  """'74%' for a target of 0.74; 'target' when there is none."""
  return 'target' if target is None else f'{100 * target:g}%'
