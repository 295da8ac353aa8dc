"""Which `RoundRunner` a run takes, from its config and its executor.

The config asks for `resident_state` (the default); the executor is the `WorkerPool` (one worker or several).
`choose_runner` turns those into one runner (`tff_meta/runtime/rounds.py`):

| workers | resident_state | runner               |
|---------|----------------|----------------------|
| 1       | true           | `ResidentRounds`     |
| > 1     | true           | `PoolResidentRounds` |
| any     | false          | `PlainRounds`        |

Where a setting cannot apply, the run falls back with a one-line note, or
stops with a `ConfigError` when it would have to drop a setting the user
needs to know about. Every runner gives the same results. The benchmarks call
this too, so that their `default` mode times the path a run takes.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tff_meta.algorithms import Algorithm
from tff_meta.program.config import ConfigError
from tff_meta.core.logs import note
from tff_meta.runtime.pool import WorkerPool
from tff_meta.runtime.pool_resident import PoolResidentRounds
from tff_meta.runtime.resident import ResidentRounds
from tff_meta.runtime.rounds import NeedsState, PlainRounds, RoundRunner


def choose_runner(alg: Algorithm, pool: WorkerPool, *,
                  resident_state: bool, num_clients: int,
                  round_batch: Callable[[int], Sequence], needs_state: NeedsState) -> RoundRunner:
  """The runner for `alg` on `pool` (module docstring).

  `round_batch(round_num)` gives a round's client data (`num_clients` of
  them);
  `needs_state(round_num)` says on which rounds the caller needs the state.
  A process with a `model_aggregator` (DP, secure aggregation: its state
  changes in ways the fused sum cannot relay) runs one round per call,
  resident on one worker, through TFF's mergeable context on a pool.
  Algorithms with client state run resident on one worker only.
  """
  workers = len(pool.addresses)
  if alg.process.model_aggregator is not None:
    if resident_state and workers > 1:
      note(f'{alg.display_name}: with DP or secure aggregation the round runs one per TFF call'
           + (' with the server state resident on the worker' if workers == 1
              and resident_state else ' through TFF\'s plain execution context')
           + ' (the pool\'s relayed sums need the plain mean).')
    resident_state = resident_state and workers == 1
  if workers > 1 and alg.stateful:
    if resident_state:
      note(f'{alg.display_name} keeps state per client, so on a pool of {workers} workers its '
           'rounds go through TFF\'s mergeable context (resident server state needs one worker '
           'for such algorithms).')
    resident_state = False
  if resident_state and workers > 1:
    return PoolResidentRounds(alg.process, pool.addresses, num_clients, needs_state,
                              tls=pool.tls)
  if resident_state:
    return ResidentRounds(alg.process, pool.addresses[0], num_clients, needs_state,
                          tls=pool.tls)
  return PlainRounds(alg.process)
