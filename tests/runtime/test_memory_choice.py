"""The worker memory budget (`memory_choice`): the sizing rule against hand-computed
numbers, and the same results whichever plan it picks."""

import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.classification import config as config_lib
from tff_meta.runtime import memory_choice
from tff_meta.runtime import contexts, workers
from tff_meta.runtime.resident import ResidentRounds
from tff_meta.runtime.rounds import PlainRounds

GIB = 2**30


def _alg(state_mb, client_mb):
  """An algorithm whose server state and client parameters have these sizes (float32)."""
  def tensor(mb):
    return tff.TensorType(np.float32, [int(mb * 1e6) // 4])
  process = types.SimpleNamespace(state_type=tff.FederatedType(tensor(state_mb), tff.SERVER),
                                  params_type=tensor(client_mb))
  return types.SimpleNamespace(display_name='Alg', process=process)


def _plan(alg, budget, calls=-1, resident=True, clients=4):
  return memory_choice.plan(alg, worker_memory_mb=budget, max_concurrent_calls=calls,
                            resident_state=resident, clients_per_round=clients)


def test_estimate_by_hand():
  # FEMNIST CNN, Meta-SGD: state = theta + alpha + Adam's two slots of each (158.5 MB), a
  # client gets theta + alpha (52.8 MB): 490 + 9 x 158.5 = 1916.5 MB, calls of
  # 8 x 52.8 = 422.4 MB: none fits in 2000 MB.
  base, call = memory_choice.estimate_mb(158_500_000, 52_800_000)
  assert base == pytest.approx(1916.5)
  assert call == pytest.approx(422.4)
  assert memory_choice.calls_within(2000, 158_500_000, 52_800_000) == 0
  # MAML: theta + Adam (79.2 MB), a client gets theta (26.4 MB): 490 + 712.8 = 1202.8 MB,
  # calls of 211.2 MB: (2000 - 1202.8) / 211.2 = 3.8 -> 3; (1500 - 1202.8) / 211.2 = 1.4 -> 1.
  assert memory_choice.calls_within(2000, 79_200_000, 26_400_000) == 3
  assert memory_choice.calls_within(1500, 79_200_000, 26_400_000) == 1
  # FedAvg: theta only (26.4 MB) on the server: 490 + 237.6 = 727.6 MB; (2000 - 727.6) /
  # 211.2 = 6.0 -> 6.
  assert memory_choice.calls_within(2000, 26_400_000, 26_400_000) == 6


def test_plans(capsys):
  fedavg, maml, metasgd = _alg(26.4, 26.4), _alg(79.2, 26.4), _alg(158.5, 52.8)
  # All 4 calls fit: as asked, silently.
  assert _plan(fedavg, 2000) == memory_choice.WorkerPlan(-1, True)
  assert capsys.readouterr().err == ''
  # 3 fit.
  assert _plan(maml, 2000) == memory_choice.WorkerPlan(3, True)
  assert 'note: Alg: 3 client call(s) at once on the worker (worker_memory_mb: 2000 MB' in \
      capsys.readouterr().err
  # Not one next to the resident state: the state is sent each round, one call at a time.
  assert _plan(metasgd, 2000) == memory_choice.WorkerPlan(1, False)
  assert 'note: Alg: one client call at a time, with the server state sent each round' in \
      capsys.readouterr().err
  # No budget, or an explicit max_concurrent_calls: as asked.
  assert _plan(metasgd, 0) == memory_choice.WorkerPlan(-1, True)
  assert _plan(metasgd, 2000, calls=3) == memory_choice.WorkerPlan(3, True)
  assert _plan(metasgd, 2000, resident=False, calls=2) == memory_choice.WorkerPlan(2, False)


def test_the_default_budget_follows_the_machine():
  assert memory_choice.budget_mb(-1, memory_bytes=8 * GIB) == 2000
  assert memory_choice.budget_mb(-1, memory_bytes=workers.BOUNDED_BELOW_BYTES) == 0
  assert memory_choice.budget_mb(0, memory_bytes=8 * GIB) == 0
  assert memory_choice.budget_mb(3000, memory_bytes=64 * GIB) == 3000


def test_the_key_is_checked_and_may_change_on_resume():
  assert 'worker_memory_mb' in config_lib.EXECUTION_ONLY
  with pytest.raises(config_lib.ConfigError, match='worker_memory_mb must be -1'):
    config_lib.load('configs/demo/digits.toml', {'worker_memory_mb': -2}).validate()


def test_the_least_memory_plan_gives_the_same_results():
  """Two Meta-SGD rounds: resident state with every call at once, and the state sent each
  round one call at a time (the plan of a small budget), give the same state and metrics
  bit for bit."""
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
  """`experiment.worker_plan`: remote workers and a caller's pool keep the config's keys."""
  from tff_meta.classification import experiment   # pylint: disable=g-import-not-at-top
  cfg = config_lib.ExperimentConfig(worker_memory_mb=2000, clients_per_round=4)
  metasgd = _alg(158.5, 52.8)
  assert experiment.worker_plan(cfg, metasgd) == memory_choice.WorkerPlan(1, False)
  assert experiment.worker_plan(cfg, metasgd, sized=False) == memory_choice.WorkerPlan(
      cfg.max_concurrent_calls, cfg.resident_state)
