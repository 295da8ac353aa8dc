"""The round's update aggregation as a tff.aggregators factory (issue #18).

Two kinds of process: FedMeta and FedEC on the digits MLP (the stateless and
the stateful round), and a model-free "echo" process whose client sends its
data as the update, so the server's step shows exactly what the aggregator
did (params start at 0 and SGD at rate 1 gives params = -aggregate).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, aggregation, fedavg, fedec, fedmeta, process

SGD = tff.learning.optimizers.build_sgdm(learning_rate=1.0)


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec(hidden=8)
  return data, model


def _echo_client_fn(params, data):
  """The client sends its `u` as the update (one example, zero metrics)."""
  del params
  update = collections.OrderedDict(weights=[data['u']])
  metrics = collections.OrderedDict((k, tf.constant(0.0)) for k in process.METRIC_NAMES)
  return update, tf.constant(1), metrics


def _echo_process(dim, model_aggregator=None):
  return process.build_federated_process(
      initial_params=collections.OrderedDict(weights=[np.zeros(dim, np.float32)]),
      client_fn=_echo_client_fn,
      client_data_spec=collections.OrderedDict(u=tf.TensorSpec([dim], tf.float32)),
      server_optimizer=SGD, model_aggregator=model_aggregator)


def _echo(proc, updates):
  state, _ = proc.next(proc.initialize(), [collections.OrderedDict(u=u) for u in updates])
  return -np.asarray(state['params']['weights'][0])


def _assert_same_params(a, b, atol):
  for x, y in zip(tf.nest.flatten(a['params']), tf.nest.flatten(b['params'])):
    np.testing.assert_allclose(x, y, atol=atol)


@pytest.mark.slow
def test_mean_factory_equals_the_default_fused_mean(tff_context, setup):
  """The default (the weighted mean inside the round's single sum) is
  tff.aggregators.MeanFactory on (update, weight): FedAvg, example weights."""
  data, model = setup
  batch = [collections.OrderedDict(x=c.all.x, y=c.all.y) for c in data.train[:3]]
  build = lambda agg: fedavg.build_fedavg_process(
      model, client_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      server_optimizer=SGD, local_epochs=1, batch_size=10, model_aggregator=agg)
  plain, factory = build(None), build(tff.aggregators.MeanFactory())
  a, _ = plain.next(plain.initialize(), batch)
  b, _ = factory.next(factory.initialize(), batch)
  _assert_same_params(a, b, atol=1e-7)
  assert 'aggregator' in b and 'aggregator' not in a


@pytest.mark.slow
@pytest.mark.parametrize('secure', [False, True])
def test_dp_without_noise_and_a_clip_that_never_binds_is_the_plain_round(
    tff_context, setup, secure):
  """FedMeta(MAML): z = 0 and a huge clip give the plain round's weights; with
  secure aggregation within its quantization (range = the clip)."""
  data, model = setup
  clients = [helpers.episode(c) for c in data.train[:3]]
  clip = 1e9 if not secure else 100.0
  build = lambda agg: fedmeta.build_fedmeta_process(
      model, variant='maml', inner_lr=0.3, inner_steps=1, server_optimizer=SGD,
      model_aggregator=agg)
  plain = build(None)
  dp = build(aggregation.dp_factory(noise_multiplier=0.0, clients_per_round=3, clip=clip,
                                    secure=secure))
  state_a, state_b = plain.initialize(), dp.initialize()
  for _ in range(2):
    state_a, metrics_a = plain.next(state_a, clients)
    state_b, metrics_b = dp.next(state_b, clients)
  atol = 1e-6 if not secure else 2 * aggregation.quantization_error_bound(clip, 3) + 1e-6
  _assert_same_params(state_a, state_b, atol=atol)
  assert metrics_a == metrics_b


def test_dp_on_a_stateful_round_without_noise_is_the_plain_round(tff_context, setup):
  """FedEC (client state): the aggregator sees the update; the states are unchanged."""
  data, model = setup
  batch = [collections.OrderedDict(x=c.all.x, y=c.all.y) for c in data.train[:3]]
  build = lambda agg: fedec.build_fedec_process(
      model, constraint='kl', alpha=0.5,
      client_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      server_optimizer=SGD, local_epochs=1, batch_size=10, model_aggregator=agg)
  plain = build(None)
  dp = build(aggregation.dp_factory(noise_multiplier=0.0, clients_per_round=3, clip=1e9))
  states = [plain.initial_client_state] * 3
  a, states_a, _ = plain.next(plain.initialize(), states, batch)
  b, states_b, _ = dp.next(dp.initialize(), states, batch)
  _assert_same_params(a, b, atol=1e-6)
  for x, y in zip(tf.nest.flatten(states_a), tf.nest.flatten(states_b)):
    np.testing.assert_allclose(x, y, atol=1e-6)


def test_clipping_bounds_each_clients_contribution(tff_context):
  """One huge update is scaled to norm C; the small ones pass unchanged; the
  sum is divided by the fixed m."""
  rng = np.random.default_rng(0)
  small = [rng.normal(size=6).astype(np.float32) * 0.01 for _ in range(2)]
  huge = np.full(6, 1e4, np.float32)
  clip = 0.5
  proc = _echo_process(6, aggregation.dp_factory(noise_multiplier=0.0, clients_per_round=3,
                                                  clip=clip))
  got = _echo(proc, [huge] + small)
  clipped = huge * clip / np.linalg.norm(huge)
  np.testing.assert_allclose(got, (clipped + small[0] + small[1]) / 3, atol=1e-6)
  # Without the DP aggregator, the same round is dominated by the huge update.
  np.testing.assert_allclose(_echo(_echo_process(6), [huge] + small)[0], 1e4 / 3, rtol=1e-3)


def test_noise_std_is_multiplier_times_clip_over_clients(tff_context):
  """All-zero updates: the mean is pure noise of std z C / m.

  TF Privacy draws the noise from TF's unseeded generator (it takes no seed),
  so this is a statistical check over 40,000 coordinates: the sample std's
  relative standard error is 1/sqrt(2 * 40000) = 0.35%, and the 3% tolerance
  is 8 standard errors, while the nearest wrong scalings (z C / sqrt(m),
  z C) are 2x and 4x off.
  """
  dim, m, z, clip = 40000, 4, 1.5, 2.0
  proc = _echo_process(dim, aggregation.dp_factory(noise_multiplier=z, clients_per_round=m,
                                                    clip=clip))
  noise = _echo(proc, [np.zeros(dim, np.float32)] * m)
  expected = z * clip / m
  assert abs(np.std(noise) / expected - 1.0) < 0.03
  assert abs(np.mean(noise)) < 5 * expected / np.sqrt(dim)


def test_secure_sum_equals_the_float_sum_within_the_quantization_bound(tff_context):
  """SecureSumFactory's clip-quantize-integer-sum, against the float64 sum."""
  rng = np.random.default_rng(1)
  bound, m = 3.0, 5
  values = [rng.uniform(-bound, bound, size=1000).astype(np.float32) for _ in range(m)]
  factory = aggregation.secure_sum_factory(bound)
  agg = factory.create(tff.TensorType(np.float32, [1000]))

  @tff.federated_computation(agg.initialize.type_signature.result,
                             tff.FederatedType(tff.TensorType(np.float32, [1000]), tff.CLIENTS))
  def secure_sum(state, client_values):
    return agg.next(state, client_values).result

  assert aggregation.uses_secure_sum(secure_sum)
  run = aggregation.simulated(secure_sum)
  assert not aggregation.uses_secure_sum(run)
  got = np.asarray(run(agg.initialize(), values))
  exact = np.sum(np.asarray(values, np.float64), axis=0)
  err = np.max(np.abs(got - exact))
  assert err <= aggregation.quantization_error_bound(bound, m)
  # Values beyond the range are clipped to it (the protocol's range, not an error).
  over = [np.full(1000, 2 * bound, np.float32)] + values[1:]
  got_over = np.asarray(run(agg.initialize(), over))
  np.testing.assert_allclose(got_over, bound + exact - values[0], atol=1e-4)


def test_dp_factory_with_secure_aggregation_composes_and_simulates(tff_context):
  proc = _echo_process(8, aggregation.dp_factory(noise_multiplier=0.0, clients_per_round=2,
                                                  clip=1.0, secure=True))
  assert proc.model_aggregator is not None
  u = [np.linspace(-0.3, 0.3, 8).astype(np.float32), np.full(8, 0.1, np.float32)]
  np.testing.assert_allclose(_echo(proc, u), (u[0] + u[1]) / 2,
                             atol=aggregation.quantization_error_bound(1.0, 2))


def test_unweighted_aggregator_needs_uniform_weighting(setup):
  _, model = setup
  with pytest.raises(ValueError, match='weighting = "uniform"'):
    fedavg.build_fedavg_process(
        model, client_optimizer=SGD, server_optimizer=SGD, local_epochs=1, batch_size=10,
        weighting='num_examples',
        model_aggregator=aggregation.dp_factory(noise_multiplier=1.0, clients_per_round=3,
                                                clip=1.0))


def test_local_only_refuses_an_aggregator(setup):
  _, model = setup
  factory = aggregation.dp_factory(noise_multiplier=1.0, clients_per_round=3, clip=1.0)
  with pytest.raises(aggregation.NotApplicableError, match='sends no update'):
    ALGORITHMS.get('local_only')(model, Hparams(), model_aggregator=factory)


@pytest.mark.slow
@pytest.mark.parametrize('name', [n for n in sorted(ALGORITHMS.names()) if n != 'local_only'])
def test_every_algorithm_takes_a_dp_aggregator(setup, name):
  """Every registered builder threads model_aggregator to its round: the
  server state holds the aggregator's."""
  _, model = setup
  hp = Hparams(weighting='uniform', population=20, sampled_clients=3, server_optimizer='sgd',
               client_optimizer='sgd', new_client_candidates=2)
  factory = aggregation.dp_factory(noise_multiplier=1.0, clients_per_round=3, clip=1.0)
  alg = ALGORITHMS.get(name)(model, hp, model_aggregator=factory)
  assert alg.process.model_aggregator is factory
  state_type = alg.process.initialize.type_signature.result.member
  assert 'aggregator' in [n for n, _ in tff.structure.iter_elements(state_type)]
