"""research/privacy_curve/curve.py: the accuracy-against-epsilon grid's pieces."""

import collections
import math

import numpy as np
import pytest

from tff_meta.algorithms import aggregation
from tff_meta.classification import accounting
from research.privacy_curve import curve as curve

INF = math.inf


def test_parse_epsilons_sorts_dedups_and_always_has_inf():
  assert curve.parse_epsilons('8, 1,inf,2,1') == [1.0, 2.0, 8.0, INF]
  assert curve.parse_epsilons('4') == [4.0, INF]
  assert curve.parse_epsilons('Infinity') == [INF]


@pytest.mark.parametrize('text', ['0', '-1', 'abc', '1,,x', 'nan'])
def test_parse_epsilons_rejects_non_positive_and_non_numbers(text):
  with pytest.raises(curve.CurveError, match='--epsilons'):
    curve.parse_epsilons(text)


def test_parse_seeds():
  assert curve.parse_seeds('2,0,1,0') == [0, 1, 2]
  for bad in ('', 'a', '-1', '0,x'):
    with pytest.raises(curve.CurveError, match='--seeds'):
      curve.parse_seeds(bad)


def test_cells_run_inf_first_per_algorithm_and_have_distinct_folders():
  grid = curve.cells(['fedavg', 'fedmeta_maml'], [0, 1], [1.0, 8.0, INF])
  assert [(c.algorithm, c.seed, c.target) for c in grid[:3]] == [
      ('fedavg', 0, INF), ('fedavg', 0, 1.0), ('fedavg', 0, 8.0)]
  assert len(grid) == 12 and [c.target for c in grid[3:6]] == [INF, 1.0, 8.0]
  folders = {c.folder('out') for c in grid}
  assert len(folders) == 12
  assert grid[0].folder('out') == 'out/seed0/fedavg/eps_inf'
  assert grid[1].folder('out') == 'out/seed0/fedavg/eps_1'


def test_noise_multiplier_reaches_the_target_with_full_participation():
  # m = N: every round is the Gaussian mechanism at z / 2 (replace-one), fast to account.
  setting = dict(population=20, clients_per_round=20, rounds=10, delta=1e-3)
  assert curve.noise_multiplier(INF, **setting) == 0.0
  z = curve.noise_multiplier(4.0, **setting)
  eps = accounting.epsilon(z, **setting)
  assert eps <= 4.0
  assert accounting.epsilon(0.97 * z, **setting) > 4.0   # the smallest z, to 1%
  curve.check_epsilon(4.0, eps)


@pytest.mark.slow
def test_noise_multiplier_with_sampling_reaches_the_target():
  setting = dict(population=40, clients_per_round=8, rounds=5, delta=1e-3)
  z = curve.noise_multiplier(8.0, **setting)
  eps = accounting.epsilon(z, **setting)
  assert 8.0 * (1 - curve.EPSILON_SLACK) <= eps <= 8.0
  # Sampling 8 of 40 needs less noise than full participation for the same epsilon.
  full = dict(setting, clients_per_round=40)
  assert z < curve.noise_multiplier(8.0, **full)


def test_cell_overrides():
  assert curve.cell_overrides(INF, 0.0, None) == {'dp_clip': 'adaptive',
                                                  'dp_noise_multiplier': 0.0}
  assert curve.cell_overrides(2.0, 3.5, 0.25) == {'dp_clip': '0.25', 'dp_noise_multiplier': 3.5}
  with pytest.raises(curve.CurveError, match='clip'):
    curve.cell_overrides(2.0, 3.5, None)


def test_check_epsilon():
  curve.check_epsilon(8.0, 7.94)
  curve.check_epsilon(8.0, 8.0)
  curve.check_epsilon(INF, INF)
  for target, reported in ((8.0, 8.01), (8.0, 5.0), (8.0, None), (8.0, INF), (INF, 3.0)):
    with pytest.raises(curve.CurveError, match='reported epsilon'):
      curve.check_epsilon(target, reported)


def test_final_clip_finds_the_queries_clip_in_nested_state():
  state = collections.OrderedDict(
      query_state=collections.OrderedDict(
          noise_multiplier=np.float32(0.0),
          sum_state=collections.OrderedDict(l2_norm_clip=np.float32(0.37), stddev=np.float32(0)),
          quantile_estimator_state=collections.OrderedDict(current_estimate=np.float32(0.4))),
      agg_state=[])
  assert curve.final_clip(state) == pytest.approx(0.37)
  with pytest.raises(curve.CurveError, match='l2_norm_clip'):
    curve.final_clip({'agg_state': [1, 2]})


@pytest.mark.slow
def test_final_clip_of_a_real_adaptive_dp_aggregator(tff_context):
  """The state TFF's adaptive DP factory starts from holds its initial clip."""
  import tensorflow_federated as tff
  factory = aggregation.dp_factory(noise_multiplier=0.0, clients_per_round=5, clip=None,
                                   target_quantile=0.5, secure=False)
  process = factory.create(tff.TensorType(np.float32, [3]))
  assert curve.final_clip(process.initialize()) == pytest.approx(aggregation.ADAPTIVE_INITIAL_CLIP)


def _row(method, target, seed, acc, eps, z=1.0, clip=0.5):
  return dict(method=method, target_epsilon=target, seed=seed, accuracy=acc, epsilon=eps,
              noise_multiplier=z, clip=clip)


def test_summarize_means_and_stds_over_seeds_and_markdown():
  rows = [_row('A', INF, 0, 90.0, INF, 0.0), _row('A', INF, 1, 94.0, INF, 0.0),
          _row('A', 2.0, 0, 50.0, 1.9), _row('A', 2.0, 1, 60.0, 2.0),
          _row('B', 2.0, 0, 30.0, 1.9, clip=0.2), _row('B', 2.0, 1, 40.0, 2.0, clip=0.4)]
  summary = curve.summarize(rows)
  assert [(s['method'], s['target_epsilon']) for s in summary] == [('A', INF), ('A', 2.0),
                                                                   ('B', 2.0)]
  a_inf, a_2, b_2 = summary
  assert a_inf['accuracy'] == 92.0 and a_inf['accuracy_std'] == pytest.approx(2 * 2 ** 0.5) and a_inf['seeds'] == 2   # ddof = 1
  assert a_2['epsilon'] == pytest.approx(1.95) and a_2['accuracy_std'] == pytest.approx(5 * 2 ** 0.5)
  assert b_2['clip'] == pytest.approx(0.3)
  table = curve.markdown(summary).splitlines()
  assert table[0] == '| Method | ε = 2 | ε = ∞ |'
  assert table[2] == '| A | 55.00 ± 7.07 | 92.00 ± 2.83 |'
  assert table[3] == '| B | 35.00 ± 7.07 |  |'
  one_seed = curve.markdown(curve.summarize(rows[:1])).splitlines()
  assert one_seed[2] == '| A | 90.00 |'


@pytest.mark.slow
def test_plot_writes_a_png(tmp_path):
  rows = [_row('A', INF, 0, 90.0, INF), _row('A', 1.0, 0, 40.0, 1.0),
          _row('A', 8.0, 0, 70.0, 8.0), _row('B', INF, 0, 80.0, INF)]
  path = tmp_path / 'fig.png'
  curve.plot(curve.summarize(rows), str(path), title='t')
  data = path.read_bytes()
  assert data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 5_000
  assert [p.name for p in tmp_path.iterdir()] == ['fig.png']   # no temp file left
