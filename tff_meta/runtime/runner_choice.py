"""Which `RoundRunner` a run takes, from its config and its executor.

The config asks for `resident_state` (the default); the executor is the `WorkerPool` (one worker or several).
`choose_runner` turns those into one runner (`tff_meta/runtime/rounds.py`):

| workers | resident_state | runner               |
|---------|----------------|----------------------|
| 1       | true           | `ResidentRounds`     |
| > 1     | true           | `PoolResidentRounds` |
| any     | false          | `PlainRounds`        |

With `clients_per_call` (0, the default: one group per worker once a worker
gets 2 or more clients; k: groups of at most k) the chosen runner runs the
process's grouped twin, wrapped in `grouped_rounds.GroupedRounds`: several
clients per TFF call, the same results. DP and secure aggregation keep one
client per call (each update is clipped and summed as its own record).

Where a setting cannot apply, the run falls back with a one-line note.
Every runner gives the same results. The benchmarks call
this too, so that their `default` mode times the path a run takes.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tff_meta.algorithms import Algorithm
from tff_meta.core.logs import note
from tff_meta.runtime import grouped_rounds
from tff_meta.runtime.pool import WorkerPool
from tff_meta.runtime.pool_resident import PoolResidentRounds
from tff_meta.runtime.resident import ResidentRounds
from tff_meta.runtime.resident_data import DataPool
from tff_meta.runtime.rounds import NeedsState, PlainRounds, RoundRunner

# clients_per_call = 0 groups a worker's clients into one call from this many on.
AUTO_MIN_CLIENTS = 2
# A resident grouped runner keeps the clients' data on the worker (`DataPool`)
# from this many clients per call on; below it a round's few clients are sent
# with it (docs/DECISIONS.md, "Several clients per TFF call").
POOL_MIN_CLIENTS = 8


def choose_runner(alg: Algorithm, pool: WorkerPool, *,
                  resident_state: bool, num_clients: int,
                  round_batch: Callable[[int], Sequence], needs_state: NeedsState,
                  clients_per_call: int = 1) -> RoundRunner:
  """The runner for `alg` on `pool` (module docstring).

  `round_batch(round_num)` gives a round's client data (`num_clients` of
  them);
  `needs_state(round_num)` says on which rounds the caller needs the state.
  A process with a `model_aggregator` (DP, secure aggregation: its state
  changes in ways the fused sum cannot relay) runs one round per call,
  resident on one worker, through TFF's mergeable context on a pool.
  Algorithms with client state run resident on one worker only.
  `clients_per_call` (k > 1: groups of at most k clients per TFF call, 0: the
  grouping `clients_per_call_for` picks) wraps the runner of the process's
  grouped twin in a `GroupedRounds`.
  """
  workers = len(pool.addresses)
  k = clients_per_call_for(alg, clients_per_call, num_clients, workers)

  def build(process, count, batches, data_spec=None):
    return _runner(alg, process, pool,
                   resident_state=resident_state, num_clients=count, round_batch=batches,
                   needs_state=needs_state, data_spec=data_spec)

  if k <= 1:
    return build(alg.process, num_clients, round_batch)
  inner = build(alg.process.grouped(), grouped_rounds.num_groups(num_clients, k),
                grouped_rounds.group_batches(alg.process, k, round_batch),
                grouped_rounds.data_spec(alg.process) if k >= POOL_MIN_CLIENTS else None)
  return grouped_rounds.GroupedRounds(alg.process, inner, k)


def clients_per_call_for(alg: Algorithm, clients_per_call: int, num_clients: int,
                         workers: int) -> int:
  """The clients per TFF call a run takes (module docstring), with a note when it is grouped.

  0 (the default) groups each worker's share of the round's clients into one call
  when that share has at least `AUTO_MIN_CLIENTS` clients (faster from the
  papers' 4 clients per round on, docs/DECISIONS.md), unless the client work steps a fused Adam in place
  (`process.steps_in_place`: FedAvg's default, slower in a group); DP and
  secure aggregation need one client per call.
  """
  if alg.process.model_aggregator is not None:
    if clients_per_call > 1:
      note(f'{alg.display_name}: with DP or secure aggregation every client runs in its own '
           f'TFF call (clients_per_call={clients_per_call} ignored): each update is clipped '
           'and summed as its own record.')
    return 1
  share = -(-num_clients // workers)
  if clients_per_call == 0:
    if share < AUTO_MIN_CLIENTS:
      return 1
    if getattr(alg.process, 'steps_in_place', False):
      note(f'{alg.display_name}: one client per TFF call (its fused Adam steps in graph '
           'variables, which a group of clients cannot; slower grouped). Set clients_per_call '
           '> 1 to group anyway.')
      return 1
    note(f'{alg.display_name}: {share} clients per TFF call ({num_clients} per round on '
         f'{workers} worker(s); clients_per_call = 0 groups them when faster, 1 = one client '
         'per call).')
    return share
  if clients_per_call > share and workers > 1:
    note(f'clients_per_call={clients_per_call}: {share} clients per call, so that each of the '
         f'{workers} workers gets a group.')
    return share
  return clients_per_call


def _runner(alg: Algorithm, process, pool: WorkerPool, *,
            resident_state: bool, num_clients: int, round_batch: Callable[[int], Sequence],
            needs_state: NeedsState, data_spec=None) -> RoundRunner:
  """The runner of `process` (`alg.process` or its grouped twin) for `num_clients` values.

  `data_spec` (one client's, for a grouped twin of `POOL_MIN_CLIENTS` or more
  clients per call): a resident runner on one worker keeps the clients' data
  there too (`resident_data.DataPool`).
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
    return PoolResidentRounds(process, pool.addresses, num_clients, needs_state,
                              tls=getattr(pool, 'tls', None))
  if resident_state:
    return ResidentRounds(process, pool.addresses[0], num_clients, needs_state,
                          tls=getattr(pool, 'tls', None),
                          data_pool=None if data_spec is None else DataPool(data_spec))
  return PlainRounds(process)
