"""tff_meta.analysis.groups: the late-gain measure of convergence, by hand."""

import numpy as np
import pytest

from tff_meta.analysis import groups
from tff_meta.core.run_folder import Run, Setting


def _run(seed, history):
  return Run(path=f'run{seed}', config={'seed': seed, 'algorithm': 'fedavg'},
             summary={'method': 'FedAvg'}, history=history,
             client_accuracies=np.zeros(2), cum_bytes=np.zeros(1), cum_flops=None)


def test_late_gain_is_the_last_quarter_minus_the_quarter_before():
  # rounds 0..100 every 10; the third quarter is (50, 75], the last (75, 100]
  history = [{'round': r, 'validation_accuracy': r / 200} for r in range(0, 101, 10)]
  level, gain = groups.late_gain(_run(0, history))
  q3, q4 = np.mean([60, 70]) / 200, np.mean([80, 90, 100]) / 200
  assert level == pytest.approx(100 * q4) and gain == pytest.approx(100 * (q4 - q3))


def test_late_gain_skips_missing_values_and_needs_both_quarters():
  history = [{'round': r, 'validation_accuracy': float('nan') if r == 90 else 0.5}
             for r in range(0, 101, 10)]
  assert groups.late_gain(_run(0, history)) == pytest.approx((50.0, 0.0))
  assert groups.late_gain(_run(0, [{'round': 100, 'validation_accuracy': 0.5}])) is None
  assert groups.late_gain(_run(0, [{'round': 10, 'test_accuracy': 0.5}])) is None


def test_late_gain_row_averages_runs_with_ddof_1():
  flat = [{'round': r, 'validation_accuracy': 0.8} for r in (60, 100)]
  rising = [{'round': 60, 'validation_accuracy': 0.7}, {'round': 100, 'validation_accuracy': 0.9}]
  group = groups.Group(setting=Setting('digits', 'mlp', 0.2), algorithm='fedavg', method='FedAvg',
                       runs=[_run(0, flat), _run(1, rising)])
  row = groups.late_gain_row(group)
  assert row['runs'] == 2
  assert row['last_quarter'] == pytest.approx(85.0) and row['last_quarter_std'] == pytest.approx(5.0 * 2 ** 0.5)
  assert row['late_gain'] == pytest.approx(10.0) and row['late_gain_std'] == pytest.approx(10.0 * 2 ** 0.5)
