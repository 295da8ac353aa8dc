"""Rounds with several clients per TFF call (`runtime.grouped_rounds`) give `process.next`'s
rounds on every runner, and the execution plan picks them (or refuses them) as documented."""

import dataclasses
import types

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams
from tff_meta.data import client_data
from tff_meta.runtime import execution_plan
from tff_meta.runtime.execution_plan import POOL_MIN_CLIENTS, ExecutionPlan, clients_per_call_for
from tff_meta.runtime import fast_values
from tff_meta.runtime.grouped_rounds import GroupedRounds
from tff_meta.runtime.pool import WorkerPool
from tff_meta.runtime.pool_resident import PoolResidentRounds
from tff_meta.runtime.resident import ResidentRounds
from tff_meta.runtime.rounds import PlainRounds


def _close(a, b):
  for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def _expected(proc, round_batch, rounds):
  state, out = proc.initialize(), []
  for r in range(1, rounds + 1):
    state, metrics = proc.next(state, round_batch(r))
    out.append((state, metrics))
  return out


def _run(runner, proc, round_batch, rounds, expected):
  state = proc.initialize()
  with runner:
    for r in range(1, rounds + 1):
      state, metrics, _ = runner.next(state, r, round_batch(r))
      _close(metrics, expected[r - 1][1])
  _close(state, expected[-1][0])


@pytest.mark.parametrize('kind', ['resident', 'plain'])
def test_grouped_runners_equal_process_next(tff_context, kind):
  proc, round_batch = helpers.fedmeta_rounds('maml', 5)
  expected = _expected(proc, round_batch, 3)
  pool = types.SimpleNamespace(addresses=[f'localhost:{tff_context.port}'])
  alg = types.SimpleNamespace(display_name='MAML', stateful=False, process=proc)
  runner = ExecutionPlan(resident_state=kind == 'resident', clients_per_call=2).runner(alg, pool,
                         num_clients=5,
                         round_batch=round_batch, needs_state=lambda r: r == 3)
  assert isinstance(runner, GroupedRounds) and runner.clients_per_call == 2
  inner = {'resident': ResidentRounds, 'plain': PlainRounds}[kind]
  assert isinstance(runner._inner, inner)  # pylint: disable=protected-access
  # A resident grouped call keeps its clients' data on the worker (POOL_MIN_CLIENTS = 2).
  pooled = getattr(runner._inner, 'takes_client_groups', False)  # pylint: disable=protected-access
  assert pooled == (kind == 'resident')
  _run(runner, proc, round_batch, 3, expected)


def test_default_groups_few_clients_and_pools_data_from_pool_min_clients(tff_context,
                                                                        monkeypatch):
  proc, round_batch = helpers.fedmeta_rounds('metasgd', 8)
  alg = types.SimpleNamespace(display_name='Meta-SGD', stateful=False, process=proc)
  pool = types.SimpleNamespace(addresses=[f'localhost:{tff_context.port}'])
  for threshold, clients, pooled in ((POOL_MIN_CLIENTS, 4, True), (8, 4, False), (8, 8, True)):
    monkeypatch.setattr(execution_plan, 'POOL_MIN_CLIENTS', threshold)
    runner = ExecutionPlan(resident_state=True, clients_per_call=0).runner(alg, pool, num_clients=clients,
                           round_batch=round_batch, needs_state=lambda r: True)
    with runner:
      assert isinstance(runner, GroupedRounds) and runner.clients_per_call == clients
      assert runner._inner.takes_client_groups == pooled  # pylint: disable=protected-access


def test_grouped_pool_rounds_equal_process_next(tff_context):
  proc, round_batch = helpers.fedmeta_rounds('fomaml', 5)
  expected = _expected(proc, round_batch, 2)
  alg = types.SimpleNamespace(display_name='FOMAML', stateful=False, process=proc)
  with WorkerPool.local(2) as pool:
    # 5 clients on 2 workers: at most 3 per call, so that both workers get a group.
    runner = ExecutionPlan(resident_state=True, clients_per_call=4).runner(alg, pool, num_clients=5,
                           round_batch=round_batch, needs_state=lambda r: r == 2)
    assert isinstance(runner._inner, PoolResidentRounds)  # pylint: disable=protected-access
    assert runner.clients_per_call == 3
    _run(runner, proc, round_batch, 2, expected)


def test_grouped_resident_rounds_carry_client_states(tff_context):
  data, model = helpers.digits_protocol(), helpers.mlp_spec()
  hparams = Hparams(client_lr=0.05, population=50, sampled_clients=4, client_optimizer='sgd')
  alg = ALGORITHMS.get('scaffold')(model, hparams)

  def round_batch(r):
    idx = client_data.sample_clients(len(data.train), 4, 0, r)
    return client_data.round_data(alg.train_data, [data.train[i] for i in idx], 0, r)
  pool = types.SimpleNamespace(addresses=[f'localhost:{tff_context.port}'])
  runner = ExecutionPlan(resident_state=True, clients_per_call=3).runner(alg, pool, num_clients=4,
                         round_batch=round_batch, needs_state=lambda r: True)
  proc = alg.process
  states = [proc.initial_client_state] * 4
  state = expected_state = proc.initialize()
  with runner:
    for r in (1, 2):
      expected_state, expected_states, expected_metrics = proc.next(
          expected_state, states, round_batch(r))
      state, metrics, states = runner.next(state, r, round_batch(r), states)
      assert len(states) == 4
      _close(metrics, expected_metrics)
      for a, b in zip(states, expected_states):
        _close(a, b)
  _close(state, expected_state)


def _alg(aggregator=None, steps_in_place=False):
  return types.SimpleNamespace(display_name='Alg', stateful=False,
                               process=types.SimpleNamespace(model_aggregator=aggregator,
                                                             in_place=steps_in_place))


def test_clients_per_call_choice_and_notes(capsys, monkeypatch):
  monkeypatch.setattr(execution_plan, 'steps_in_place', lambda process: process.in_place)
  assert clients_per_call_for(_alg(), 1, 64, 1) == 1
  assert clients_per_call_for(_alg(), 0, 1, 1) == 1           # one client: nothing to group
  assert clients_per_call_for(_alg(), 0, 2, 1) == 2           # AUTO_MIN_CLIENTS
  assert clients_per_call_for(_alg(), 0, 4, 1) == 4           # the papers' 4 clients a round
  assert clients_per_call_for(_alg(), 0, 2, 2) == 1           # 1 per worker
  assert clients_per_call_for(_alg(), 0, 14, 2) == 7          # 7 per worker
  assert clients_per_call_for(_alg(), 0, 15, 2) == 8          # 8 and 7
  assert clients_per_call_for(_alg(), 0, 64, 1) == 64
  assert clients_per_call_for(_alg(), 0, 64, 2) == 32         # one group per worker
  assert clients_per_call_for(_alg(), 16, 64, 2) == 16
  assert clients_per_call_for(_alg(), 48, 64, 2) == 32        # every worker gets a group
  assert clients_per_call_for(_alg(aggregator=object()), 8, 64, 1) == 1
  assert clients_per_call_for(_alg(aggregator=object()), 0, 64, 1) == 1
  # A fused Adam stepping in place is slower in a group: not grouped unless asked.
  assert clients_per_call_for(_alg(steps_in_place=True), 0, 64, 1) == 1
  assert clients_per_call_for(_alg(steps_in_place=True), 8, 64, 1) == 8
  err = capsys.readouterr().err
  assert 'its fused Adam steps in graph variables' in err
  assert 'note: Alg: 64 clients per TFF call (64 per round on 1 worker(s)' in err
  assert 'note: clients_per_call=48: 32 clients per call' in err
  assert 'note: clients_per_call=4: 3 clients per call' not in err
  assert 'with DP or secure aggregation every client runs in its own TFF call' in err


def test_config_refuses_negative_clients_per_call():
  from tff_meta.classification import config as config_lib  # pylint: disable=g-import-not-at-top
  cfg = config_lib.ExperimentConfig(dataset='digits', model='mlp')
  assert cfg.clients_per_call == 0
  with pytest.raises(config_lib.ConfigError, match='clients_per_call must be >= 0'):
    dataclasses.replace(cfg, clients_per_call=-1).validate()


def test_fast_values_build_tffs_proto():
  import collections  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.proto.v0 import executor_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import value_serialization  # pylint: disable=g-import-not-at-top
  member = tff.StructType([('x', tff.TensorType(np.float32, [None, 2])),
                           ('n', tff.StructType([tff.TensorType(np.int32)]))])
  value_type = tff.FederatedType(member, tff.CLIENTS)
  value = [collections.OrderedDict(x=np.ones((k, 2), np.float32) * k, n=[np.int32(k)])
           for k in (1, 3)]
  expected, _ = value_serialization.serialize_value(value, value_type)
  assert fast_values.value_proto(value, value_type, executor_pb2.Value()) == expected
  with pytest.raises(TypeError, match='1 elements'):
    fast_values.value_proto([collections.OrderedDict(x=value[0]['x'])], value_type,
                            executor_pb2.Value())
