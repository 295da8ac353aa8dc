"""tff_meta/core/tables.py: the exact Markdown text that the reports, the programs and the README
catalog print, and the number formats."""

from tff_meta.core import tables


def test_markdown_table_text():
  assert tables.markdown_table(['a', 'b c'], [[1, 'x'], [2.5, '']]) == (
      '| a | b c |\n|---|---|\n| 1 | x |\n| 2.5 |  |')
  assert tables.markdown_table(['only'], []) == '| only |\n|---|'


def test_cost_and_percent_formats():
  assert tables.num(12345.6) == '12,346' and tables.num(0.012345) == '0.01235'
  assert tables.mean_pm_std(2.0, 0.5, 1) == '2' and tables.mean_pm_std(2.0, 0.5, 3) == '2 ± 0.5'
  assert tables.pct(12.5) == '12.50' and tables.pct(3.14159) == '3.14'
  assert tables.pct_label(0.74) == '74%' and tables.pct_label(None) == 'target'
