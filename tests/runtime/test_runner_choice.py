"""Which runner a run takes (`runner_choice.choose_runner`). The runners' results
are checked in tests/runtime/."""

import types

from tff_meta.runtime.runner_choice import choose_runner
from tff_meta.runtime.rounds import PlainRounds, RoundRunner


def _alg(stateful=False, aggregator=None):
  return types.SimpleNamespace(display_name='Alg', stateful=stateful,
                               process=types.SimpleNamespace(model_aggregator=aggregator))


def _choose(alg, workers, resident_state):
  pool = types.SimpleNamespace(addresses=[f'localhost:{i}' for i in range(workers)])
  return choose_runner(alg, pool, resident_state=resident_state,
                       num_clients=4, round_batch=lambda r: [], needs_state=lambda r: True)


def test_plain_paths():
  assert isinstance(_choose(_alg(), 1, False), PlainRounds)
  assert isinstance(_choose(_alg(), 2, False), PlainRounds)
  assert isinstance(_choose(_alg(), 1, False), RoundRunner)


def test_fallbacks_are_noted(capsys):
  # DP / secure aggregation: the plain context on a pool.
  assert isinstance(_choose(_alg(aggregator=object()), 3, True), PlainRounds)
  assert isinstance(_choose(_alg(stateful=True), 2, True), PlainRounds)
  err = capsys.readouterr().err
  assert 'note: Alg: with DP or secure aggregation the round runs one per TFF call' in err
  assert 'note: Alg keeps state per client, so on a pool of 2 workers' in err
