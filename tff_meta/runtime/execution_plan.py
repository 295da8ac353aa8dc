"""The execution plan: how a run's rounds execute, decided in one place.

An algorithm declares its round (`algorithms.FederatedProcess`: initialize,
client update, aggregation, server update and their types) and nothing about
execution. `ExecutionPlan` decides the rest from the algorithm, the config's
execution keys and the machine, each choice giving the same results:

- memory (`plan`): the calls the local worker runs at once and whether the
  server state stays on it, sized from a budget (`worker_memory_mb`);
- the runner (`ExecutionPlan.runner`, `tff_meta/runtime/rounds.py`):

  | workers | resident_state | runner               |
  |---------|----------------|----------------------|
  | 1       | true           | `ResidentRounds`     |
  | > 1     | true           | `PoolResidentRounds` |
  | any     | false          | `PlainRounds`        |

- clients per call (`clients_per_call_for`): 0 (the default) groups each
  worker's share of a round into one call once it has 2 or more clients,
  unless the client work steps a fused Adam in graph variables
  (`steps_in_place`, read from the client computation's graph:
  `learning/fused_adam.py`), which a group's loop cannot, so it is slower
  grouped; DP and secure aggregation keep one client per call (each update is
  clipped and summed as its own record). A grouped run takes the process's
  grouped twin (`runtime/grouped.py`) behind `grouped_rounds.GroupedRounds`;
- resident data: a grouped resident runner of `POOL_MIN_CLIENTS` or more
  clients per call on one worker keeps the clients' arrays there
  (`resident_data.DataPool`).

The memory rule: a worker runs every client call of a round at once unless
`max_concurrent_calls` bounds it, and with `resident_state` keeps the server
state between rounds:

  peak ~ RUNTIME_MB + STATE_COPIES x state bytes + calls x CALL_COPIES x client bytes

`state bytes` are the server state (parameters, optimizer slots, Meta-SGD's
per-parameter rates: Chen et al. 2018, "Federated Meta-Learning with Fast
Convergence and Efficient Communication") and `client bytes` what a client
receives (`params_type`). The constants are fitted to the peaks of the FEMNIST
Table 2 cells with the bounded allocator settings (`workers.BOUNDED_MEMORY_ENV`;
docs/runs/worker_memory): the state is held ~9 times at a round's peak (old
and new state, the mean update, the optimizer's temporaries) and a client call
~4 times what it receives (its copy, the adapted and second-order tensors, its
update; one more Meta-SGD call added 216 MB at 20% support), taken as 8 for
the larger support sets of the 90% cells and the ~250 MB one setting's peak
varies between runs. When not even one call fits next to the resident state,
the state is sent each round and one call runs at a time. The budget applies
to workers this program starts; remote workers are sized by their own
`programs.worker --max_concurrent_calls`.

Where a setting cannot apply, the run falls back with a one-line note. The
benchmarks build their runners here too, so that their `default` mode times
the path a run takes.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.core.logs import note
from tff_meta.evaluation.communication import type_num_bytes
from tff_meta.learning import fused_adam
from tff_meta.runtime import grouped, grouped_rounds, workers
from tff_meta.runtime.pool_resident import PoolResidentRounds
from tff_meta.runtime.resident import ResidentRounds
from tff_meta.runtime.resident_data import DataPool
from tff_meta.runtime.rounds import NeedsState, PlainRounds, RoundRunner

# clients_per_call = 0 groups a worker's clients into one call from this many on.
AUTO_MIN_CLIENTS = 2
# A resident grouped runner keeps the clients' data on the worker (`DataPool`)
# from this many clients per call on: every group (docs/DECISIONS.md, "The data
# pool from 2 clients per call"; `benchmarks/fixed_cost.py --pool_min_clients`).
POOL_MIN_CLIENTS = 2
RUNTIME_MB = 490.0   # TF and TFF in the worker, the evaluation's and the round's graphs
STATE_COPIES = 9.0   # server states a round holds at its peak
CALL_COPIES = 8.0    # a client call's peak, in multiples of what it receives
# The budget `worker_memory_mb = -1` stands for: on the machines that get the
# bounded allocator settings (`workers.default_env`), none elsewhere.
BOUNDED_BUDGET_MB = 2000.0
AUTO, NO_BUDGET = -1, 0


@dataclasses.dataclass(frozen=True)
class ExecutionPlan:
  """How a run's rounds execute (module docstring); every plan gives the same results.

  Attributes:
    resident_state: the server state stays on the worker between rounds.
    clients_per_call: clients per TFF call asked for (0 = `clients_per_call_for`'s pick).
    max_concurrent_calls: client calls the local worker runs at once (-1 = no bound).
  """
  resident_state: bool = True
  clients_per_call: int = 0
  max_concurrent_calls: int = -1

  def runner(self, alg, pool, *, num_clients: int, round_batch: Callable[[int], Sequence],
             needs_state: NeedsState) -> RoundRunner:
    """The `RoundRunner` of `alg` (an `algorithms.Algorithm`) on `pool` (a `WorkerPool`).

    `round_batch(round_num)` gives a round's client data (`num_clients` of
    them); `needs_state(round_num)` says on which rounds the caller needs the
    state. A process with a `model_aggregator` (DP, secure aggregation: its
    state changes in ways the fused sum cannot relay) runs one round per
    call, resident on one worker, through TFF's mergeable context on a pool;
    algorithms with client state run resident on one worker only.
    """
    k = clients_per_call_for(alg, self.clients_per_call, num_clients, len(pool.addresses))

    def build(process, count, batches, data_spec=None):
      return _runner(alg, process, pool, resident_state=self.resident_state, num_clients=count,
                     round_batch=batches, needs_state=needs_state, data_spec=data_spec)

    if k <= 1:
      return build(alg.process, num_clients, round_batch)
    inner = build(grouped.grouped_process(alg.process), grouped_rounds.num_groups(num_clients, k),
                  grouped_rounds.group_batches(alg.process, k, round_batch),
                  grouped.data_spec(alg.process) if k >= POOL_MIN_CLIENTS else None)
    return grouped_rounds.GroupedRounds(alg.process, inner, k)


def plan(alg, *, resident_state: bool = True, clients_per_call: int = 0,
         max_concurrent_calls: int = -1, worker_memory_mb: float = NO_BUDGET,
         clients_per_round: int = 1, memory_bytes: Optional[float] = None) -> ExecutionPlan:
  """The plan of `alg` (an `algorithms.Algorithm`) for the config's execution keys, its
  local worker sized by `worker_memory_mb` (module docstring; 0 = the keys as they are).

  An explicit `max_concurrent_calls` (not -1) is kept as it is; so is a round whose
  `clients_per_round` calls all fit, or whose grouped calls all fit (one group of k clients
  a call, `clients_per_call_for`).
  """
  asked = ExecutionPlan(resident_state, clients_per_call, max_concurrent_calls)
  budget = budget_mb(worker_memory_mb, memory_bytes)
  if budget <= 0 or max_concurrent_calls != -1:
    return asked
  state = type_num_bytes(alg.process.state_type)
  client = type_num_bytes(alg.process.params_type)
  calls = calls_within(budget, state, client)
  base, call = estimate_mb(state, client)
  if calls >= clients_per_round:
    return asked
  # A grouped round makes one call per group of k clients (`_grouping`): all of them fit?
  k = _grouping(alg, clients_per_call, clients_per_round, 1)[0] if calls >= 1 else 1
  if k > 1 and grouped_rounds.num_groups(clients_per_round, k) <= calls:
    return asked
  if calls >= 1:
    note(f'{alg.display_name}: {calls} client call(s) at once on the worker '
         f'(worker_memory_mb: {budget:.0f} MB; the state needs ~{base:.0f} MB, a call '
         f'~{call:.0f} MB). Set max_concurrent_calls to choose.')
    return dataclasses.replace(asked, max_concurrent_calls=calls)
  note(f'{alg.display_name}: one client call at a time, with the server state sent each '
       f'round (worker_memory_mb: {budget:.0f} MB; the resident state needs ~{base:.0f} MB, '
       f'a call ~{call:.0f} MB; same results, slower rounds). Set max_concurrent_calls or '
       'worker_memory_mb = 0 to choose.')
  return dataclasses.replace(asked, resident_state=False, max_concurrent_calls=1)


def budget_mb(worker_memory_mb: float, memory_bytes: Optional[float] = None) -> float:
  """The budget in MB that `worker_memory_mb` stands for (0 = none): -1 gives
  `BOUNDED_BUDGET_MB` on a machine with less than `workers.BOUNDED_BELOW_BYTES` of
  memory (`memory_bytes`, this machine's by default), no budget elsewhere."""
  if worker_memory_mb != AUTO:
    return float(worker_memory_mb)
  memory = workers.machine_memory_bytes() if memory_bytes is None else memory_bytes
  return BOUNDED_BUDGET_MB if memory < workers.BOUNDED_BELOW_BYTES else float(NO_BUDGET)


def estimate_mb(state_bytes: int, client_bytes: int) -> tuple:
  """(MB of the worker without client calls, MB of one client call) (module docstring)."""
  return (RUNTIME_MB + STATE_COPIES * state_bytes / 1e6, CALL_COPIES * client_bytes / 1e6)


def calls_within(budget: float, state_bytes: int, client_bytes: int) -> int:
  """Client calls that fit at once in `budget` MB next to the resident state (may be 0)."""
  base, call = estimate_mb(state_bytes, client_bytes)
  return max(0, int((budget - base) // call)) if call > 0 else 1 << 30


def steps_in_place(process) -> bool:
  """Whether one client's work steps a fused Adam in graph variables (its computation's
  graph holds `fused_adam.IN_PLACE_OP`)."""
  proto = tff.framework.ConcreteComputation.get_proto(process.client_update)
  graph = tf.compat.v1.GraphDef()
  proto.tensorflow.graph_def.Unpack(graph)
  return fused_adam.steps_in_graph(graph)


def _grouping(alg, clients_per_call: int, num_clients: int, num_workers: int) -> tuple:
  """(clients per TFF call, the note that says why, or '') of `clients_per_call_for`."""
  if alg.process.model_aggregator is not None:
    return 1, (f'{alg.display_name}: with DP or secure aggregation every client runs in its own '
               f'TFF call (clients_per_call={clients_per_call} ignored): each update is clipped '
               'and summed as its own record.' if clients_per_call > 1 else '')
  share = -(-num_clients // num_workers)
  if clients_per_call == 0:
    if share < AUTO_MIN_CLIENTS:
      return 1, ''
    if steps_in_place(alg.process):
      return 1, (f'{alg.display_name}: one client per TFF call (its fused Adam steps in graph '
                 'variables, which a group of clients cannot; slower grouped). Set '
                 'clients_per_call > 1 to group anyway.')
    return share, (f'{alg.display_name}: {share} clients per TFF call ({num_clients} per round '
                   f'on {num_workers} worker(s); clients_per_call = 0 groups them when faster, '
                   '1 = one client per call).')
  if clients_per_call > share and num_workers > 1:
    return share, (f'clients_per_call={clients_per_call}: {share} clients per call, so that '
                   f'each of the {num_workers} workers gets a group.')
  return clients_per_call, ''


def clients_per_call_for(alg, clients_per_call: int, num_clients: int, num_workers: int) -> int:
  """The clients per TFF call a run takes (module docstring), with a note when it is grouped."""
  k, why = _grouping(alg, clients_per_call, num_clients, num_workers)
  if why:
    note(why)
  return k


def _runner(alg, process, pool, *, resident_state: bool, num_clients: int,
            round_batch: Callable[[int], Sequence], needs_state: NeedsState,
            data_spec=None) -> RoundRunner:
  """The runner of `process` (`alg.process` or its grouped twin) for `num_clients` values;
  `data_spec` (one client's): a resident runner on one worker keeps the data there too."""
  count = len(pool.addresses)
  if alg.process.model_aggregator is not None:
    if resident_state and count > 1:
      note(f'{alg.display_name}: with DP or secure aggregation the round runs one per TFF call'
           ' through TFF\'s plain execution context (the pool\'s relayed sums need the plain '
           'mean).')
    resident_state = resident_state and count == 1
  if count > 1 and alg.stateful:
    if resident_state:
      note(f'{alg.display_name} keeps state per client, so on a pool of {count} workers its '
           'rounds go through TFF\'s mergeable context (resident server state needs one worker '
           'for such algorithms).')
    resident_state = False
  tls = getattr(pool, 'tls', None)
  if resident_state and count > 1:
    return PoolResidentRounds(process, pool.addresses, num_clients, needs_state, tls=tls)
  if resident_state:
    return ResidentRounds(process, pool.addresses[0], num_clients, needs_state, tls=tls,
                          data_pool=None if data_spec is None else DataPool(data_spec))
  return PlainRounds(process)
