"""How a run fits its local TFF worker in a memory budget (`worker_memory_mb`).

A worker runs every client call of a round at once unless
`max_concurrent_calls` bounds it, and with `resident_state` it keeps the
server state between rounds. Both cost memory; the budget sizes them from
what a call and the state hold, not from the number of clients:

  peak ~ RUNTIME_MB + STATE_COPIES x state bytes + calls x CALL_COPIES x client bytes

`state bytes` are the process's server state (parameters, optimizer slots,
Meta-SGD's per-parameter rates: Chen et al. 2018, "Federated Meta-Learning
with Fast Convergence and Efficient Communication") and `client bytes` what a
client receives (`params_type`). The constants are fitted to the peaks of the
FEMNIST Table 2 cells with the bounded allocator settings
(`runtime/workers.py`, `BOUNDED_MEMORY_ENV`; docs/runs/worker_memory):
the state is held ~9 times at a round's peak (old and new state, the mean
update, the optimizer's temporaries) and a client call ~4 times what it
receives (its copy, the adapted and second-order tensors, its update; one
more Meta-SGD call added 216 MB at 20% support), taken as 8 for the larger
support sets of the 90% cells, whose second-order passes hold more
activations, and the ~250 MB that one setting's peak varies between runs.

`plan` turns the budget into the worker's `max_concurrent_calls` (only when the
config leaves it at -1) and, when not even one call fits next to the resident
state, runs the rounds with the state sent each round (`resident_state`
off) and one call at a time, the least memory a round takes. Every choice
gives the same results (docs/CONFIG.md); a one-line note says what was chosen.
The budget applies to workers this program starts; remote workers are sized
by their own `programs.worker --max_concurrent_calls`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from tff_meta.core.logs import note
from tff_meta.evaluation.communication import type_num_bytes
from tff_meta.runtime import workers

RUNTIME_MB = 490.0   # TF and TFF in the worker, the evaluation's and the round's graphs
STATE_COPIES = 9.0   # server states a round holds at its peak
CALL_COPIES = 8.0    # a client call's peak, in multiples of what it receives
# The budget `worker_memory_mb = -1` stands for: on the machines that get the
# bounded allocator settings (`workers.default_env`), none elsewhere.
BOUNDED_BUDGET_MB = 2000.0
AUTO, NO_BUDGET = -1, 0


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
  """What a run asks of its local worker: calls at once (-1 = no bound) and resident state."""
  max_concurrent_calls: int
  resident_state: bool


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


def plan(alg, *, worker_memory_mb: float, max_concurrent_calls: int, resident_state: bool,
         clients_per_round: int, memory_bytes: Optional[float] = None) -> WorkerPlan:
  """The `WorkerPlan` of `alg` (an `algorithms.Algorithm`) in its worker budget.

  An explicit `max_concurrent_calls` (not -1) is kept as it is; so is a round
  whose `clients_per_round` calls all fit.
  """
  asked = WorkerPlan(max_concurrent_calls, resident_state)
  budget = budget_mb(worker_memory_mb, memory_bytes)
  if budget <= 0 or max_concurrent_calls != -1:
    return asked
  state = type_num_bytes(alg.process.state_type)
  client = type_num_bytes(alg.process.params_type)
  calls = calls_within(budget, state, client)
  base, call = estimate_mb(state, client)
  if calls >= clients_per_round:
    return asked
  if calls >= 1:
    note(f'{alg.display_name}: {calls} client call(s) at once on the worker '
         f'(worker_memory_mb: {budget:.0f} MB; the state needs ~{base:.0f} MB, a call '
         f'~{call:.0f} MB). Set max_concurrent_calls to choose.')
    return WorkerPlan(calls, resident_state)
  note(f'{alg.display_name}: one client call at a time, with the server state sent each '
       f'round (worker_memory_mb: {budget:.0f} MB; the resident state needs ~{base:.0f} MB, '
       f'a call ~{call:.0f} MB; same results, slower rounds). Set max_concurrent_calls or '
       'worker_memory_mb = 0 to choose.')
  return WorkerPlan(1, False)
