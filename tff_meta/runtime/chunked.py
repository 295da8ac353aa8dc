"""Rounds run `rounds_per_call` at a time (issue #8), behind the one round interface.

`algorithms/multi_round.py` builds the computation of k rounds in one TFF
call; this module decides which rounds go into a call. A call ends at the
first round on which the loop needs the state (evaluation, checkpoint and
final rounds, `needs_state`), so those rounds see it. The clients of every
round of a call are sampled up front with the seeds of single rounds
(`round_batch(r)`), so the sampled clients and the state equal those of
one round per call. One worker only, and no client state (the unrolled
rounds have no mergeable form, and client states change between them).
"""

from __future__ import annotations

import collections
from typing import Callable, Dict, Optional, Sequence

from tff_meta.algorithms import multi_round
from tff_meta.runtime.rounds import NeedsState, RoundResult, RoundRunner, check_no_client_states


def chunk_end(last_done: int, rounds_per_call: int, needs_state: NeedsState) -> int:
  """The last round of the call that starts after round `last_done`.

  The call stops at the first round r with `needs_state(r)` (evaluation,
  checkpoint and final rounds), so those rounds see the state.
  """
  end = last_done + 1
  while end < last_done + rounds_per_call and not needs_state(end):
    end += 1
  return end


class MultiRoundCalls:
  """Runs a list of rounds with as few TFF calls as `rounds_per_call` allows.

  `run(state, batches)` takes the data of consecutive rounds ([round][client])
  and returns (state after them, [metrics of each round]). One round calls
  `process.next`; j > 1 rounds call the j-round computation (built once per j).
  """

  def __init__(self, process, rounds_per_call: int = 1):
    if rounds_per_call < 1:
      raise ValueError(f'rounds_per_call must be >= 1, got {rounds_per_call}.')
    self.process = process
    self.rounds_per_call = rounds_per_call
    self._computations: Dict[int, Callable] = {}

  def run(self, state, batches: Sequence[Sequence]):
    if not 1 <= len(batches) <= self.rounds_per_call:
      raise ValueError(f'Got {len(batches)} rounds for one call; rounds_per_call is '
                       f'{self.rounds_per_call}.')
    if len(batches) == 1:
      state, metrics = self.process.next(state, batches[0])
      return state, [metrics]
    k = len(batches)
    if k not in self._computations:
      self._computations[k] = multi_round.build_multi_round_next(self.process, k)
    state, metrics = self._computations[k](state, multi_round.stack_rounds(batches))
    return state, [collections.OrderedDict(m) if isinstance(m, dict) else m for m in metrics]


class ChunkedRounds(RoundRunner):
  """A per-round view of rounds run `rounds_per_call` at a time.

  `next(state, round_num, batch)` at the first round of a call runs that
  call's rounds in one TFF call (`batch` for round `round_num`, the later
  rounds' data from `round_batch(r)`) and returns each round's metrics in
  turn. The state is the one after the call at the call's last round, which
  `needs_state` makes every evaluation and checkpoint round; before it the
  given state is returned unchanged.
  """

  def __init__(self, process, rounds_per_call: int, round_batch: Callable[[int], Sequence],
               needs_state: NeedsState):
    self.calls = MultiRoundCalls(process, rounds_per_call)
    self._round_batch = round_batch
    self._needs_state = needs_state
    self._pending: Dict[int, object] = {}
    self._end, self._state = 0, None

  def next(self, state, round_num: int, batch: Sequence,
           client_states: Optional[Sequence] = None) -> RoundResult:
    check_no_client_states(self, client_states)
    if round_num not in self._pending:
      self._end = chunk_end(round_num - 1, self.calls.rounds_per_call, self._needs_state)
      rounds = range(round_num, self._end + 1)
      batches = [batch if r == round_num else self._round_batch(r) for r in rounds]
      self._state, metrics = self.calls.run(state, batches)
      self._pending = dict(zip(rounds, metrics))
    metrics = self._pending.pop(round_num)
    return RoundResult(self._state if round_num == self._end else state, metrics)
