"""How the training loop runs a round: one interface, three runners.

The loop (`classification/training_loop.py`) builds each round's client data once and
hands it to a `RoundRunner`:

    runner.next(state, round_num, batch[, client_states]) -> RoundResult

Every runner gives the results of `process.next` on that round; they differ
in how much state crosses between Python and the TFF workers:

- `PlainRounds` (here): `process.next` in the installed execution context,
  one worker or a worker pool through TFF's mergeable context;
- `resident.ResidentRounds` (`resident_state`, one worker): the state stays
  on the worker between rounds;
- `pool_resident.PoolResidentRounds` (`resident_state`, a pool): the state
  stays on worker 0, the round's clients are split over the workers.

The two resident runners return the current state only on the rounds where
`needs_state(round_num)` (evaluation, checkpoint and final rounds, the
loop's schedule); on the others `RoundResult.state` is the given state,
stale. Algorithms with client state pass the round's `client_states` and
get them back in `RoundResult.client_states`. `runtime/execution_plan.py`
picks the runner from the algorithm, the config and the executor.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, List, Mapping, NamedTuple, Optional, Sequence

# round_num -> whether the caller needs the state after that round.
NeedsState = Callable[[int], bool]


class RoundResult(NamedTuple):
  """A round's outputs: the server state (stale unless `needs_state`), the
  round's metrics, and the sampled clients' new states (None without)."""
  state: Any
  metrics: Mapping[str, Any]
  client_states: Optional[List[Any]] = None


class RoundRunner(abc.ABC):
  """Runs the rounds of one training session; a context manager that `close`s."""

  @abc.abstractmethod
  def next(self, state, round_num: int, batch: Sequence,
           client_states: Optional[Sequence] = None) -> RoundResult:
    """Runs round `round_num` on `batch` (the round's client data, one per client)."""

  def close(self) -> None:
    """Releases what the runner holds on the workers (nothing by default)."""

  def __enter__(self) -> 'RoundRunner':
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def check_no_client_states(runner: RoundRunner, client_states: Optional[Sequence]) -> None:
  if client_states is not None:
    raise ValueError(f'{type(runner).__name__} runs algorithms without client state; '
                     'use ResidentRounds or PlainRounds for this one.')


class PlainRounds(RoundRunner):
  """`process.next` in the installed execution context; the state always crosses."""

  def __init__(self, process):
    self._process = process

  def next(self, state, round_num: int, batch: Sequence,
           client_states: Optional[Sequence] = None) -> RoundResult:
    if client_states is None:
      return RoundResult(*self._process.next(state, batch))
    state, client_states, metrics = self._process.next(state, client_states, batch)
    return RoundResult(state, metrics, client_states)
