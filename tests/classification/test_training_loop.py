"""The training loop's one stop rule (`Schedule`), one client sampling
(`RoundSampler`) and its evaluation in calls of clients (`eval_calls`). Whole
runs are checked in test_resample.py,
test_client_states.py and tests/programs/test_train.py."""

import numpy as np
import pytest

from tests import helpers
from tff_meta.algorithms import ALGORITHMS
from tff_meta.data import client_data
from tff_meta.classification import round_evaluation
from tff_meta.classification.training_loop import RoundSampler, Schedule
from tff_meta.runtime.pool import WorkerPool


def test_schedule_is_the_one_stop_rule():
  s = Schedule(rounds=12, eval_every=5, checkpoint_every=4, final_eval_rounds=2)
  assert [r for r in range(1, 13) if s.evaluates(r)] == [5, 10, 11, 12]
  assert [r for r in range(1, 13) if s.checkpoints(r)] == [4, 8, 12]
  assert [r for r in range(1, 13) if s.needs_state(r)] == [4, 5, 8, 10, 11, 12]


def test_sampler_gives_the_seeded_clients_and_their_data():
  data = helpers.digits_protocol()
  sampler = RoundSampler('full', data.train, clients_per_round=3, seed=7)
  assert sampler.num_clients == 3
  for r in (1, 2):
    sampled = sampler.sample(r)
    idx = client_data.sample_clients(len(data.train), 3, 7, r)
    assert [c.client_id for c in sampled.clients] == [data.train[i].client_id for i in idx]
    for got, want in zip(sampled.batch, client_data.round_data('full', sampled.clients, 7, r)):
      np.testing.assert_array_equal(got['x'], want['x'])
  with pytest.raises(ValueError, match='clients_per_round = 3 needs 1 to 2'):
    RoundSampler('full', data.train[:2], 3, 7)   # refused, not capped at 2


def test_sampler_builds_each_round_once(monkeypatch):
  """A caller may sample rounds ahead; when the loop then asks for the
  same rounds: their data is built once, and matches a fresh sampler's."""
  data = helpers.digits_protocol()
  built = []
  real = client_data.round_data
  monkeypatch.setattr(client_data, 'round_data',
                      lambda kind, clients, seed, r, **kw: built.append(r) or real(
                          kind, clients, seed, r, **kw))
  sampler = RoundSampler('full', data.train, clients_per_round=3, seed=7)
  ahead = [sampler.sample(r) for r in (3, 4, 5)]      # a call of 3 rounds, read ahead
  again = [sampler.sample(r) for r in (3, 4, 5)]      # the loop, round by round
  assert built == [3, 4, 5]
  assert all(a is b for a, b in zip(ahead, again))
  sampler.done(4)
  assert sorted(sampler._built) == [5]   # pylint: disable=protected-access
  fresh = RoundSampler('full', data.train, clients_per_round=3, seed=7).sample(4)
  assert [c.client_id for c in fresh.clients] == [c.client_id for c in again[1].clients]


def test_eval_calls_fill_an_example_budget_and_a_client_cap():
  calls = lambda sizes, budget, cap: [(c.start, c.stop) for c in
                                      round_evaluation.eval_calls(sizes, budget, cap)]
  assert calls([3, 4, 2, 5, 1], 7, 8) == [(0, 2), (2, 4), (4, 5)]   # 7, 7, 1 examples
  assert calls([3, 4, 2, 5, 1], 100, 2) == [(0, 2), (2, 4), (4, 5)]  # the client cap
  assert calls([9, 2, 12, 1], 5, 8) == [(0, 1), (1, 2), (2, 3), (3, 4)]  # too big: alone
  assert calls([2, 2, 2], 6, 8) == [(0, 3)]   # a budget met exactly
  assert calls([], 5, 8) == []


@pytest.mark.slow
def test_evaluation_in_chunks_scores_every_client_as_one_call_does(tff_worker, monkeypatch):
  """`evaluate` splits the clients into calls by examples and count (worker memory);
  the per-client scores must be those of one call over all clients."""
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  pool = WorkerPool([f'localhost:{tff_worker.port}'])
  try:
    for name in ('fedmeta_maml', 'fedper'):   # stateless, and clients with state
      alg = ALGORITHMS.get(name)(model)
      params = alg.params(alg.process.initialize())
      clients = data.test[:5]
      monkeypatch.setattr(round_evaluation, 'EVAL_EXAMPLES_PER_CALL', 10**9)
      monkeypatch.setattr(round_evaluation, 'EVAL_CLIENTS_PER_CALL', 100)
      whole = round_evaluation.evaluate(alg, params, clients, pool)
      for budget, cap in ((10**9, 2), (1, 100)):   # calls of 2, 2, 1; one client per call
        monkeypatch.setattr(round_evaluation, 'EVAL_EXAMPLES_PER_CALL', budget)
        monkeypatch.setattr(round_evaluation, 'EVAL_CLIENTS_PER_CALL', cap)
        chunked = round_evaluation.evaluate(alg, params, clients, pool)
        assert chunked.num_examples == whole.num_examples == sum(len(c.query.y) for c in clients)
        np.testing.assert_allclose(chunked.client_accuracies, whole.client_accuracies)
        np.testing.assert_allclose([chunked.accuracy, chunked.loss], [whole.accuracy, whole.loss],
                                   rtol=1e-6)
  finally:
    pool.close()
