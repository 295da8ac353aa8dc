"""Which runner a run takes (`runner_choice.choose_runner`), and the loop's one
stop rule and client sampling. The runners' results are checked in
tests/runtime/ and tests/program/test_rounds_per_call.py."""

import types

import numpy as np
import pytest

from tests import helpers
from tff_meta.program import client_data
from tff_meta.program.config import ConfigError
from tff_meta.program.runner_choice import choose_runner
from tff_meta.program.training_loop import RoundSampler, Schedule
from tff_meta.runtime.chunked import ChunkedRounds
from tff_meta.runtime.rounds import PlainRounds, RoundRunner


def _alg(stateful=False, aggregator=None):
  return types.SimpleNamespace(display_name='Alg', stateful=stateful,
                               process=types.SimpleNamespace(model_aggregator=aggregator))


def _choose(alg, workers, rounds_per_call, resident_state):
  pool = types.SimpleNamespace(addresses=[f'localhost:{i}' for i in range(workers)])
  return choose_runner(alg, pool, rounds_per_call=rounds_per_call, resident_state=resident_state,
                       num_clients=4, round_batch=lambda r: [], needs_state=lambda r: True)


def test_plain_and_chunked_paths():
  assert isinstance(_choose(_alg(), 1, 1, False), PlainRounds)
  assert isinstance(_choose(_alg(), 2, 1, False), PlainRounds)
  assert isinstance(_choose(_alg(stateful=True), 2, 1, True), PlainRounds)
  chunked = _choose(_alg(), 1, 3, False)
  assert isinstance(chunked, ChunkedRounds) and isinstance(chunked, RoundRunner)
  assert chunked.calls.rounds_per_call == 3


def test_fallbacks_are_noted(capsys):
  assert isinstance(_choose(_alg(), 1, 4, True), ChunkedRounds)
  # DP / secure aggregation: one round per call, the plain context on a pool.
  assert isinstance(_choose(_alg(aggregator=object()), 1, 5, False), PlainRounds)
  assert isinstance(_choose(_alg(aggregator=object()), 3, 1, True), PlainRounds)
  err = capsys.readouterr().err
  assert 'note: rounds_per_call=4: the server state crosses once per call' in err
  assert 'note: Alg: with DP or secure aggregation the round runs one per TFF call' in err


def test_settings_that_cannot_apply_are_config_errors():
  with pytest.raises(ConfigError, match=r'worker pool \(2 workers\) rounds_per_call must be 1'):
    _choose(_alg(), 2, 2, False)
  with pytest.raises(ConfigError, match='use resident_state = true instead'):
    _choose(_alg(stateful=True), 1, 2, False)


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
  assert RoundSampler('full', data.train[:2], 3, 7).num_clients == 2
