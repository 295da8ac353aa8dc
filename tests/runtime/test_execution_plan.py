"""The execution plan (`runtime.execution_plan`): the worker memory budget against
hand-computed numbers, the runner each setting takes, the fused Adam read from the client
graph, and the same results, bit for bit, whichever plan it picks."""

import dataclasses
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.classification import config as config_lib
from tff_meta.algorithms import ALGORITHMS, Hparams
from tff_meta.runtime import contexts, execution_plan, workers
from tff_meta.runtime.execution_plan import ExecutionPlan
from tff_meta.runtime.grouped_rounds import GroupedRounds
from tff_meta.runtime.resident import ResidentRounds
from tff_meta.runtime.rounds import PlainRounds

GIB = 2**30


def _alg(state_mb, client_mb):
  """An algorithm whose server state and client parameters have these sizes (float32)."""
  def tensor(mb):
    return tff.TensorType(np.float32, [int(mb * 1e6) // 4])
  process = types.SimpleNamespace(state_type=tff.FederatedType(tensor(state_mb), tff.SERVER),
                                  params_type=tensor(client_mb), model_aggregator=None)
  return types.SimpleNamespace(display_name='Alg', process=process)


def _plan(alg, budget, calls=-1, resident=True, clients=4, per_call=0):
  return execution_plan.plan(alg, worker_memory_mb=budget, max_concurrent_calls=calls,
                             resident_state=resident, clients_per_round=clients,
                             clients_per_call=per_call)


def _asked(calls, resident, per_call=0):
  return ExecutionPlan(resident_state=resident, clients_per_call=per_call,
                       max_concurrent_calls=calls)


def test_estimate_by_hand():
  # FEMNIST CNN, Meta-SGD: state = theta + alpha + Adam's two slots of each (158.5 MB), a
  # client gets theta + alpha (52.8 MB): 490 + 9 x 158.5 = 1916.5 MB, calls of
  # 8 x 52.8 = 422.4 MB: none fits in 2000 MB.
  base, call = execution_plan.estimate_mb(158_500_000, 52_800_000)
  assert base == pytest.approx(1916.5)
  assert call == pytest.approx(422.4)
  assert execution_plan.calls_within(2000, 158_500_000, 52_800_000) == 0
  # MAML: theta + Adam (79.2 MB), a client gets theta (26.4 MB): 490 + 712.8 = 1202.8 MB,
  # calls of 211.2 MB: (2000 - 1202.8) / 211.2 = 3.8 -> 3; (1500 - 1202.8) / 211.2 = 1.4 -> 1.
  assert execution_plan.calls_within(2000, 79_200_000, 26_400_000) == 3
  assert execution_plan.calls_within(1500, 79_200_000, 26_400_000) == 1
  # FedAvg: theta only (26.4 MB) on the server: 490 + 237.6 = 727.6 MB; (2000 - 727.6) /
  # 211.2 = 6.0 -> 6.
  assert execution_plan.calls_within(2000, 26_400_000, 26_400_000) == 6


def test_plans(capsys, monkeypatch):
  monkeypatch.setattr(execution_plan, 'steps_in_place', lambda process: False)
  fedavg, maml, metasgd = _alg(26.4, 26.4), _alg(79.2, 26.4), _alg(158.5, 52.8)
  # All 4 calls fit: as asked, silently.
  assert _plan(fedavg, 2000, per_call=1) == _asked(-1, True, per_call=1)
  assert capsys.readouterr().err == ''
  # 3 of the 4 one-client calls fit.
  assert _plan(maml, 2000, per_call=1) == _asked(3, True, per_call=1)
  assert 'note: Alg: 3 client call(s) at once on the worker (worker_memory_mb: 2000 MB' in \
      capsys.readouterr().err
  # Grouped (clients_per_call = 0: the 4 clients in one call), the one call fits: as asked.
  assert _plan(maml, 2000) == _asked(-1, True)
  assert 'call(s) at once' not in capsys.readouterr().err
  # Groups of 2: 4 clients make 2 calls, which fit; 20 clients make 10, of which 3 fit.
  assert _plan(maml, 2000, per_call=2) == _asked(-1, True, per_call=2)
  assert _plan(maml, 2000, clients=20, per_call=2) == _asked(3, True, per_call=2)
  # Not one next to the resident state: the state is sent each round, one call at a time.
  assert _plan(metasgd, 2000) == _asked(1, False)
  assert 'note: Alg: one client call at a time, with the server state sent each round' in \
      capsys.readouterr().err
  # No budget, or an explicit max_concurrent_calls: as asked.
  assert _plan(metasgd, 0) == _asked(-1, True)
  assert _plan(metasgd, 2000, calls=3) == _asked(3, True)
  assert _plan(metasgd, 2000, resident=False, calls=2) == _asked(2, False)


def test_the_default_budget_follows_the_machine():
  assert execution_plan.budget_mb(-1, memory_bytes=8 * GIB) == 2000
  assert execution_plan.budget_mb(-1, memory_bytes=workers.BOUNDED_BELOW_BYTES) == 0
  assert execution_plan.budget_mb(0, memory_bytes=8 * GIB) == 0
  assert execution_plan.budget_mb(3000, memory_bytes=64 * GIB) == 3000


def test_the_key_is_checked_and_may_change_on_resume():
  assert 'worker_memory_mb' in config_lib.EXECUTION_ONLY
  with pytest.raises(config_lib.ConfigError, match='worker_memory_mb must be -1'):
    config_lib.load('configs/demo/digits.toml', {'worker_memory_mb': -2}).validate()


def test_the_runners_of_the_most_and_least_memory_give_the_same_results():
  """Two Meta-SGD rounds on the two runners a memory budget chooses between: resident state
  with every call at once, and the state sent each round one call at a time (what `plan()`
  picks under a small budget, `test_plans`),
  give the same state and metrics bit for bit."""
  proc, round_batch = helpers.fedmeta_rounds('metasgd', 4)
  outputs = []
  for calls, resident in ((-1, True), (1, False)):
    with workers.WorkerProcess(max_concurrent_calls=calls) as worker:
      with tff.framework.get_context_stack().install(contexts.sync_context_for(worker)):
        state = proc.initialize()
        runner = (ResidentRounds(proc, worker.address, 4, needs_state=lambda r: r == 2)
                  if resident else PlainRounds(proc))
        with runner:
          for r in (1, 2):
            state, metrics, _ = runner.next(state, r, round_batch(r))
    outputs.append([np.asarray(x) for x in tf.nest.flatten((state, metrics))])
  for a, b in zip(*outputs):
    np.testing.assert_array_equal(a, b)


def test_only_a_worker_the_run_starts_is_sized():
  """`experiment.execution`: remote workers and a caller's pool keep the config's keys."""
  from tff_meta.classification import experiment   # pylint: disable=g-import-not-at-top
  cfg = config_lib.ExperimentConfig(worker_memory_mb=2000, clients_per_round=4)
  metasgd = _alg(158.5, 52.8)
  assert experiment.execution(cfg, metasgd) == _asked(1, False)
  assert experiment.execution(cfg, metasgd, sized=False) == _asked(
      cfg.max_concurrent_calls, cfg.resident_state)


def _runner_alg(stateful=False, aggregator=None):
  return types.SimpleNamespace(display_name='Alg', stateful=stateful,
                               process=types.SimpleNamespace(model_aggregator=aggregator))


def _choose(alg, workers_, resident_state):
  pool = types.SimpleNamespace(addresses=[f'localhost:{i}' for i in range(workers_)])
  return ExecutionPlan(resident_state=resident_state, clients_per_call=1).runner(
      alg, pool, num_clients=4, round_batch=lambda r: [], needs_state=lambda r: True)


def test_plain_paths():
  assert isinstance(_choose(_runner_alg(), 1, False), PlainRounds)
  assert isinstance(_choose(_runner_alg(), 2, False), PlainRounds)


def test_fallbacks_are_noted(capsys):
  # DP / secure aggregation: the plain context on a pool.
  assert isinstance(_choose(_runner_alg(aggregator=object()), 3, True), PlainRounds)
  assert isinstance(_choose(_runner_alg(stateful=True), 2, True), PlainRounds)
  err = capsys.readouterr().err
  assert 'note: Alg: with DP or secure aggregation the round runs one per TFF call' in err
  assert 'note: Alg keeps state per client, so on a pool of 2 workers' in err


def test_steps_in_place_is_read_from_the_client_graph():
  """FedAvg's default client Adam steps graph variables in place (slower in a group)."""
  model, hp = helpers.mlp_spec(), Hparams(inner_lr=0.1, server_lr=0.01, client_lr=0.05)
  assert execution_plan.steps_in_place(ALGORITHMS.get('fedavg')(model, hp).process)
  assert not execution_plan.steps_in_place(ALGORITHMS.get('fedmeta_maml')(model, hp).process)
  sgd = dataclasses.replace(hp, client_optimizer='sgd')
  assert not execution_plan.steps_in_place(ALGORITHMS.get('fedavg')(model, sgd).process)


def _same_bits(a, b):
  for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _plan_against_plain(alg, plan, round_batch, num_clients, rounds, port):
  """`rounds` rounds through `plan`'s runner, and through `process.next` one client per call:
  the same state and metrics, bit for bit."""
  pool = types.SimpleNamespace(addresses=[f'localhost:{port}'])
  runner = plan.runner(alg, pool, num_clients=num_clients, round_batch=round_batch,
                       needs_state=lambda r: r == rounds)
  state = expected = alg.process.initialize()
  with runner:
    for r in range(1, rounds + 1):
      state, metrics, _ = runner.next(state, r, round_batch(r))
      expected, expected_metrics = alg.process.next(expected, round_batch(r))
      _same_bits(metrics, expected_metrics)
  _same_bits(state, expected)
  assert not np.array_equal(tf.nest.flatten(state['params'])[0],
                            tf.nest.flatten(alg.process.initialize()['params'])[0])
  return runner


@pytest.mark.parametrize('name', ['fedavg', 'fedmeta_maml'])
def test_the_demo_runs_bit_for_bit_through_its_plan(tff_context, name):
  """configs/demo/digits.toml's MLP: the plan the run takes (5 clients grouped into one call,
  the state resident) gives `process.next`'s params and metrics bit for bit."""
  from tff_meta.classification import experiment, training_loop   # pylint: disable=g-import-not-at-top
  cfg = config_lib.load('configs/demo/digits.toml', {}).for_algorithm(name, 'unused').validate()
  data = experiment.prepare_data(cfg)
  alg = experiment.build_algorithm(cfg, experiment.build_model(cfg, data), data)
  sampler = training_loop.RoundSampler(alg.train_data, data.train, cfg.clients_per_round,
                                       cfg.seed)
  plan = experiment.execution(cfg, alg)
  runner = _plan_against_plain(alg, plan, lambda r: sampler.sample(r).batch,
                               sampler.num_clients, 3, tff_context.port)
  assert isinstance(runner, GroupedRounds) and runner.clients_per_call == cfg.clients_per_round


def test_a_small_maml_setup_runs_bit_for_bit_through_its_plan(tff_context):
  proc, round_batch = helpers.fedmeta_rounds('maml', 4)
  alg = types.SimpleNamespace(display_name='MAML', stateful=False, process=proc)
  runner = _plan_against_plain(alg, ExecutionPlan(), round_batch, 4, 3, tff_context.port)
  assert isinstance(runner, GroupedRounds) and runner.clients_per_call == 4
