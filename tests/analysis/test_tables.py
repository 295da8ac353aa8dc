"""tff_meta/analysis/tables.py: the run summary's exact Markdown text."""

from tff_meta.analysis import tables


def test_format_table_keeps_the_columns_some_row_has():
  row = dict(method='FedAvg', accuracy=91.234, client_mean=90.0, client_std=3.25, rounds=10.0,
             mb_sent=1.5, train_seconds=12.34)
  assert tables.format_table([row]) == (
      '| Method | Accuracy % (all query points) | Client mean % | Client std % | Rounds '
      '| MB sent (up+down) | Train s |\n'
      '|---|---|---|---|---|---|---|\n'
      '| FedAvg | 91.23 | 90.00 | 3.25 | 10 | 1.50 | 12.3 |')


def test_the_paired_column_shows_where_a_row_has_it_and_a_dash_elsewhere():
  base = dict(method='FedAvg', accuracy=90.0, rounds=10.0)
  paired = dict(base, method='MAML', vs_reference=2.345, vs_reference_ci95=1.5,
                vs_reference_clients=20, vs_reference_seeds=2)
  assert tables.paired_cell(paired) == '+2.35 ± 1.50 (20 clients, 2 seed(s))'
  assert tables.format_table([base, paired]).splitlines()[2:] == [
      '| FedAvg | 90.00 | 10 | — |',
      '| MAML | 90.00 | 10 | +2.35 ± 1.50 (20 clients, 2 seed(s)) |']
  assert 'vs FedAvg' not in tables.format_table([base])


def test_seed_std_is_the_sample_std():
  # (1, 2, 3): mean 2, squared deviations 1 + 0 + 1 over n - 1 = 2 -> 1.0 (ddof = 0 gives 0.816)
  assert tables.seed_std([1.0, 2.0, 3.0]) == 1.0
  assert tables.seed_std([96.0]) == 0.0
