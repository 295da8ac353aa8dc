"""The server state resident on worker 0 of a 2-worker pool gives the rounds of `process.next`."""

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.runtime import pool_resident
from tff_meta.runtime.pool import WorkerPool


def test_split_counts_are_balanced_and_need_a_client_per_worker():
  assert pool_resident.split_counts(7, 2) == [4, 3]
  assert pool_resident.split_counts(6, 3) == [2, 2, 2]
  with pytest.raises(ValueError, match='3 clients per round cannot be split over 4 workers'):
    pool_resident.split_counts(3, 4)


@pytest.mark.slow
def test_pool_rounds_equal_process_next(tff_context):
  proc, round_batch = helpers.fedmeta_rounds('maml', 5)

  single = proc.initialize()
  expected = []
  for r in range(1, 5):
    single, metrics = proc.next(single, round_batch(r))
    expected.append(metrics)
  with WorkerPool.local(2) as pool:
    rounds = pool_resident.PoolResidentRounds(proc, pool.addresses, 5,
                                              needs_state=lambda r: r in (2, 4))
    try:
      state = proc.initialize()
      for r in range(1, 5):
        state, metrics, _ = rounds.next(state, r, round_batch(r))
        for key in expected[r - 1]:
          np.testing.assert_allclose(metrics[key], expected[r - 1][key], rtol=1e-5)
        assert int(state['round_num']) == (r if r in (2, 4) else (0 if r == 1 else 2))
      for x, y in zip(tf.nest.flatten(state), tf.nest.flatten(single)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
      with pytest.raises(ValueError, match='built for 5 clients per round, got 3'):
        rounds.next(state, 5, round_batch(5)[:3])
    finally:
      rounds.close()


def test_pool_residency_refuses_client_state():
  class Stateful:
    stateful, server_update = True, object()   # a process with client state
  with pytest.raises(ValueError, match='needs an algorithm without client state'):
    pool_resident.build_pieces(Stateful())
