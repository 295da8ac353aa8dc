"""Which runner a run takes (`runner_choice.choose_runner`). The runners' results
are checked in tests/runtime/ and tests/program/test_rounds_per_call.py."""

import types

import pytest

from tff_meta.program.config import ConfigError
from tff_meta.program.runner_choice import choose_runner
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
