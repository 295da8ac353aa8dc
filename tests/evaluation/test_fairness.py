"""Fairness summaries of per-client accuracy, checked by hand; the KDE is a density."""

import numpy as np
import pytest
from scipy import stats

from tff_meta.evaluation import fairness

TENTHS = [0.7, 0.1, 1.0, 0.4, 0.2, 0.9, 0.3, 0.6, 0.5, 0.8]   # 0.1 .. 1.0, shuffled


def test_summary_by_hand():
  s = fairness.summarize(TENTHS)
  assert s.num_clients == 10
  assert s.mean == pytest.approx(0.55)
  # population std of 0.1..1.0 = 0.1 * sqrt((10^2 - 1) / 12)
  assert s.std == pytest.approx(0.1 * np.sqrt(99 / 12))
  # linear interpolation at position q/100 * (n - 1) of the sorted values
  assert s.percentiles == pytest.approx({10: 0.19, 25: 0.325, 50: 0.55, 75: 0.775, 90: 0.91})
  assert (s.worst_count, s.worst_mean) == (1, pytest.approx(0.1))
  assert (s.min, s.max) == (pytest.approx(0.1), pytest.approx(1.0))
  d = s.as_dict()
  assert d['p50'] == pytest.approx(0.55) and d['worst_mean'] == pytest.approx(0.1)


def test_percentiles_of_four_values():
  s = fairness.summarize([0.0, 1.0, 0.5, 0.25], percentiles=(25, 50, 75))
  # sorted 0, .25, .5, 1; positions 0.75, 1.5, 2.25
  assert s.percentiles == pytest.approx({25: 0.1875, 50: 0.375, 75: 0.625})


@pytest.mark.parametrize('n, expected', [(1, 1), (5, 1), (10, 1), (11, 2), (20, 2), (25, 3),
                                         (30, 3), (31, 4), (100, 10)])
def test_worst_count_is_ceil_of_ten_percent(n, expected):
  assert fairness.worst_count(n) == expected


def test_worst_mean_by_hand():
  values = [0.9, 0.2, 0.8, 0.1, 0.7, 0.6, 0.5, 0.4, 0.3, 1.0, 0.95, 0.05]   # 12 -> worst 2
  assert fairness.worst_mean(values) == pytest.approx((0.05 + 0.1) / 2)
  assert fairness.worst_mean(values, fraction=0.25) == pytest.approx((0.05 + 0.1 + 0.2) / 3)
  assert fairness.worst_mean([0.3]) == pytest.approx(0.3)


def test_non_finite_values_are_dropped_and_nothing_left_is_an_error():
  s = fairness.summarize([0.5, float('nan'), 1.0, float('inf')])
  assert s.num_clients == 2 and s.mean == pytest.approx(0.75)
  with pytest.raises(ValueError, match='no finite'):
    fairness.summarize([])
  with pytest.raises(ValueError, match='no finite'):
    fairness.kde([float('nan')])
  with pytest.raises(ValueError):
    fairness.worst_count(10, fraction=0)


def _integral(d):
  return np.trapz(d.density, d.grid)


def test_kde_integrates_to_one_and_matches_scipy():
  rng = np.random.default_rng(0)
  values = rng.beta(5, 2, size=40)
  d = fairness.kde(values, min_bandwidth=1e-6)
  assert not d.degenerate
  assert _integral(d) == pytest.approx(1.0, abs=1e-3)
  # Scott's bandwidth, as scipy's default: the same curve.
  np.testing.assert_allclose(d.density, stats.gaussian_kde(values)(d.grid), rtol=1e-10)
  assert d.bandwidth == pytest.approx(40 ** -0.2 * np.std(values, ddof=1))


def test_kde_bandwidth_floor():
  values = [0.50, 0.501, 0.502, 0.503]
  d = fairness.kde(values, min_bandwidth=0.05)
  assert d.bandwidth == pytest.approx(0.05)
  assert _integral(d) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize('values', [[0.8], [0.6] * 7, [1.0] * 3])
def test_kde_degenerate_values_do_not_crash(values):
  d = fairness.kde(values, min_bandwidth=0.02)
  assert d.degenerate and d.bandwidth == pytest.approx(0.02)
  assert np.all(np.isfinite(d.density))
  assert _integral(d) == pytest.approx(1.0, abs=1e-3)
  assert d.grid[np.argmax(d.density)] == pytest.approx(values[0], abs=0.01)
  s = fairness.summarize(values)
  assert s.std == 0 and s.worst_mean == pytest.approx(values[0])
  assert list(s.percentiles.values()) == pytest.approx([values[0]] * 5)


@pytest.mark.parametrize('values', [[0.0, 0.05, 0.1, 0.9, 0.95, 1.0, 1.0, 1.0],
                                    [1.0, 1.0, 1.0], [0.5]])
def test_bounded_kde_keeps_its_mass_inside(values):
  d = fairness.kde(values, bounds=(0.0, 1.0), min_bandwidth=0.02)
  assert d.grid[0] == 0.0 and d.grid[-1] == 1.0
  assert _integral(d) == pytest.approx(1.0, abs=2e-3)
  # Outside the bounds the density is 0 on a grid that reaches past them.
  wide = fairness.kde(values, grid=np.linspace(-0.5, 1.5, 2001), bounds=(0.0, 1.0),
                      min_bandwidth=0.02)
  inside = (wide.grid >= 0) & (wide.grid <= 1)
  assert np.all(wide.density[~inside] == 0)
  np.testing.assert_allclose(wide.density[inside],
                             fairness.kde(values, grid=wide.grid[inside], bounds=(0.0, 1.0),
                                          min_bandwidth=0.02).density)


def test_bounds_must_hold_the_values():
  with pytest.raises(ValueError, match='bounds'):
    fairness.kde([0.1, 0.5], bounds=(0.2, 0.8))
  with pytest.raises(ValueError, match='bounds'):
    fairness.kde([0.5], bounds=(1.0, 0.0))
