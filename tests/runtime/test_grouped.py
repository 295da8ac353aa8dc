"""Several clients per TFF call (`runtime.grouped`) give the round of one client per call."""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams
from tff_meta.runtime import grouped
from tff_meta.data import client_data

HPARAMS = Hparams(inner_lr=0.1, server_lr=0.01, client_lr=0.05)


def _setup(name, num_clients=5, hparams=HPARAMS):
  data, model = helpers.digits_protocol(), helpers.mlp_spec()
  try:
    alg = ALGORITHMS.get(name)(model, hparams)
  except ValueError:   # SCAFFOLD's local step is plain SGD
    alg = ALGORITHMS.get(name)(model, dataclasses.replace(hparams, client_optimizer='sgd'))

  def round_batch(r):
    idx = client_data.sample_clients(len(data.train), num_clients, 0, r)
    return client_data.round_data(alg.train_data, [data.train[i] for i in idx], 0, r)
  return alg, round_batch


def _assert_same(a, b, rtol=1e-5, atol=1e-6):
  for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def _check_rounds(alg, round_batch, clients_per_call, rounds=2):
  """`rounds` rounds of alg.process and of its grouped twin from the same state."""
  proc = alg.process
  twin = grouped.grouped_process(proc)
  assert twin.data_type != proc.data_type and twin.state_type == proc.state_type
  spec = grouped.data_spec(proc)
  state = grouped_state = proc.initialize()
  client_states = grouped_states = None
  for r in range(1, rounds + 1):
    batch = round_batch(r)
    groups = grouped.pack_groups(batch, spec, clients_per_call)
    assert len(groups) == -(-len(batch) // clients_per_call)
    if proc.stateful:
      if client_states is None:
        client_states = grouped_states = [proc.initial_client_state] * len(batch)
      state, client_states, metrics = proc.next(state, client_states, batch)
      grouped_state, stacked, grouped_metrics = twin.next(
          grouped_state, grouped.stack_states(grouped_states, clients_per_call), groups)
      grouped_states = grouped.unstack_states(stacked)
      assert len(grouped_states) == len(batch)
      for a, b in zip(client_states, grouped_states):
        _assert_same(a, b)
    else:
      state, metrics = proc.next(state, batch)
      grouped_state, grouped_metrics = twin.next(grouped_state, groups)
    assert grouped_metrics['num_clients'] == len(batch)
    for key in metrics:
      np.testing.assert_allclose(grouped_metrics[key], metrics[key], rtol=1e-5, atol=1e-6)
    _assert_same(grouped_state, state)
  # The rounds moved the state (so equal states are not both the initial one).
  assert proc.stateful or not np.allclose(tf.nest.flatten(state['params'])[0],
                         tf.nest.flatten(proc.initialize()['params'])[0])


@pytest.mark.parametrize('name', ['fedavg', 'fedmeta_maml', 'fedmeta_fomaml', 'fedmeta_metasgd'])
def test_grouped_rounds_equal_one_client_per_call(tff_context, name):
  alg, round_batch = _setup(name)
  _check_rounds(alg, round_batch, clients_per_call=2)


@pytest.mark.parametrize('name', ['fedmeta_maml', 'fedmeta_fomaml', 'fedmeta_metasgd'])
def test_one_group_of_the_papers_4_clients_is_bit_for_bit_one_client_per_call(tff_context, name):
  """The default groups a round's 4 clients into one call (`execution_plan`); the group adds
  its clients in order from zeros as TFF's sum does, so no FedMeta result moves."""
  alg, round_batch = _setup(name, num_clients=4,
                            hparams=dataclasses.replace(HPARAMS, weighting='num_examples'))
  proc, spec = alg.process, grouped.data_spec(alg.process)
  state = grouped_state = proc.initialize()
  twin = grouped.grouped_process(proc)
  for r in (1, 2):
    batch = round_batch(r)
    state, metrics = proc.next(state, batch)
    grouped_state, grouped_metrics = twin.next(grouped_state, grouped.pack_groups(batch, spec, 4))
    for a, b in zip(tf.nest.flatten((state, metrics)),
                    tf.nest.flatten((grouped_state, grouped_metrics))):
      np.testing.assert_array_equal(a, b)


OTHERS = sorted(set(ALGORITHMS.names()) - {'fedavg', 'fedmeta_maml', 'fedmeta_fomaml',
                                           'fedmeta_metasgd', 'scaffold'})


@pytest.mark.parametrize('name', OTHERS)
def test_every_algorithm_grouped_equals_one_client_per_call(tff_context, name):
  """One round of every other registered algorithm (client state included)."""
  hparams = dataclasses.replace(HPARAMS, population=50, sampled_clients=4)
  alg, round_batch = _setup(name, num_clients=4, hparams=hparams)
  _check_rounds(alg, round_batch, clients_per_call=3, rounds=1)


def test_maml_second_order_gradient_survives_grouping(tff_context):
  """The group's sum is MAML's, not FOMAML's: the two differ, grouped MAML equals MAML."""
  maml, round_batch = _setup('fedmeta_maml', num_clients=3)
  fomaml, _ = _setup('fedmeta_fomaml', num_clients=3)
  batch = round_batch(1)
  params = maml.process.initialize()['params']
  group = grouped.pack_groups(batch, grouped.data_spec(maml.process), 3)
  assert len(group) == 1
  total = grouped.grouped_process(maml.process).client_update(params, group[0])
  first_order = grouped.grouped_process(fomaml.process).client_update(params, group[0])
  alone = [maml.process.client_update(params, c) for c in batch]
  expected = tf.nest.map_structure(lambda *xs: sum(xs), *alone)
  _assert_same(total, expected)
  diff = max(np.max(np.abs(a - b)) for a, b in zip(
      tf.nest.flatten(total['weighted_update']), tf.nest.flatten(first_order['weighted_update'])))
  assert diff > 1e-4


def test_rejected_client_in_a_group_is_counted_and_dropped(tff_context):
  alg, round_batch = _setup('fedmeta_maml', num_clients=3)
  batch = round_batch(1)
  empty = collections.OrderedDict((k, v[:0]) for k, v in batch[1].items())
  nan = collections.OrderedDict(batch[2])
  nan['support_x'] = np.full_like(nan['support_x'], np.nan)
  batch = [batch[0], empty, nan]
  params = alg.process.initialize()['params']
  group = grouped.pack_groups(batch, grouped.data_spec(alg.process), 3)[0]
  total = grouped.grouped_process(alg.process).client_update(params, group)
  alone = alg.process.client_update(params, batch[0])
  assert total['num_clients'] == 3 and total['num_rejected'] == 2
  _assert_same(total['weighted_update'], alone['weighted_update'])


def test_client_states_follow_their_clients_in_groups(tff_context):
  hparams = dataclasses.replace(HPARAMS, population=50, sampled_clients=5,
                                client_optimizer='sgd')
  alg, round_batch = _setup('scaffold', hparams=hparams)
  assert alg.stateful
  _check_rounds(alg, round_batch, clients_per_call=2)


def test_dp_and_secure_aggregation_refuse_grouping():
  from tff_meta.algorithms import aggregation  # pylint: disable=g-import-not-at-top
  model = helpers.mlp_spec()
  factory = aggregation.dp_factory(noise_multiplier=0.0, clip=1.0, clients_per_round=4)
  alg = ALGORITHMS.get('fedmeta_maml')(model, HPARAMS, model_aggregator=factory)
  with pytest.raises(grouped.GroupingError, match='default aggregator'):
    grouped.grouped_process(alg.process)


def test_group_sizes_and_packing():
  assert grouped.group_sizes(64, 64) == [64]
  assert grouped.group_sizes(5, 2) == [2, 2, 1]
  assert grouped.group_sizes(10, 4) == [4, 3, 3]
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 2], tf.float32),
                                 s=tf.TensorSpec([], tf.int32))
  clients = [dict(x=np.ones((n, 2), np.float32) * n, s=n) for n in (3, 0, 2)]
  (group,) = grouped.pack_groups(clients, spec, 3)
  assert group['data']['x'].shape == (5, 2) and list(group['data']['s']) == [3, 0, 2]
  np.testing.assert_array_equal(group['rows'], [[3], [0], [2]])
  states = [dict(v=np.float32(i)) for i in range(5)]
  stacked = grouped.stack_states(states, 2)
  assert [len(g['v']) for g in stacked] == [2, 2, 1]
  assert [float(s['v']) for s in grouped.unstack_states(stacked)] == [0, 1, 2, 3, 4]
