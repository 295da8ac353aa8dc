"""benchmarks/common.py: the table cells of a timing (medians and their ratios), by hand."""

from benchmarks import common


def test_timing_cells_are_medians_and_their_ratios():
  times = {'tff': {'wall': [0.3, 0.1, 0.2], 'cpu': [0.2, 0.4, 0.3]},
           'ref': {'wall': [0.05, 0.2, 0.1], 'cpu': [0.15, 0.1, 0.2]}}
  assert common.timing_cells(times) == [
      '0.200 [0.100-0.300]', '0.100 [0.050-0.200]', '2.00',   # wall: 0.2 / 0.1
      '0.300', '0.150', '2.00']                                # CPU: 0.3 / 0.15
  assert common.TIMING_HEADER[2] == 'ratio' and common.TIMING_HEADER[5] == 'CPU ratio'


def test_the_ratio_is_of_the_unrounded_medians():
  times = {'tff': {'wall': [0.0014], 'cpu': [1.0]}, 'ref': {'wall': [0.0006], 'cpu': [3.0]}}
  cells = common.timing_cells(times)
  assert cells[:3] == ['0.001 [0.001-0.001]', '0.001 [0.001-0.001]', '2.33']   # 1.4 / 0.6
  assert cells[5] == '0.33'
