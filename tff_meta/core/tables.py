"""Markdown and CSV tables, and the number formats of every task's results.

`markdown_table` is the one Markdown table writer: the classification report
and run summary (`analysis.tables`, `analysis.report`), few-round's results.md
(`fewround.experiment`), the recommendation tables (`recommendation.movielens_task`,
`service_task`), the tables `programs.reproduce` and `programs.sweep` print, the
README's catalog (`tff_meta.catalog`) and the benchmarks' headers all go
through it. It sits in `core` so that every task can use it from below.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from tff_meta.core.files import atomic_open


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  """A Markdown table: `| a | b |`, a `|---|---|` rule, then one line per row (cells str())."""
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '|'.join('---' for _ in header) + '|']
  lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
  return '\n'.join(lines)


def write_csv(rows: Sequence[Dict], path: str) -> None:
  """`rows` as a CSV with a header (the union of their keys, in order), written atomically."""
  import pandas as pd  # pylint: disable=g-import-not-at-top
  with atomic_open(path, 'w', newline='') as f:
    pd.DataFrame(list(rows)).to_csv(f, index=False)


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
