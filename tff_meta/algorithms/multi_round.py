"""Several rounds in one TFF invocation (`rounds_per_call`, issue #8).

A TFF round on the FEMNIST CNN spends most of its time moving the server
state (theta plus the server optimizer's slots, ~79 MB with Adam) from Python
to the C++ worker: TFF serializes every argument of every call. Running k
rounds per call moves the state once per k rounds. The k rounds are the
single round of `process.py` unrolled k times in one
`tff.federated_computation`, with the same TFF pieces (`get_params`,
`client_update`, `server_update`, `round_metrics`), so the math is exactly
that of k calls to `process.next` (FedMeta Alg. 1, one outer step per round):

    next_k(state@SERVER, <D_1,...,D_k>@CLIENTS):
      for r in 1..k:
        params  = federated_broadcast(get_params(state))
        total   = federated_sum(federated_map(client_update, (params, D_r)))
        state   = federated_map(server_update, (state, total))
        m_r     = federated_map(round_metrics, total)
      return state, <m_1,...,m_k>

Client i of the call holds its data for each of the k rounds (`stack_rounds`):
the clients of every round are sampled up front by the caller, with the same
seeds as single rounds, so the sampled clients and the state are identical.
The k aggregation stages are chained, so this computation has no mergeable
form: it runs on one worker, not on a worker pool.

Type signature (S = state, D = one client's data, M = round metrics):
    next_k: (<S@SERVER, {<D,...,D>}@CLIENTS> -> <S@SERVER, <M,...,M>@SERVER>)
"""

from __future__ import annotations

import collections
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import tensorflow_federated as tff

_PIECES = ('data_type', 'get_params', 'client_update', 'server_update',
           'round_metrics')


def build_multi_round_next(process, rounds_per_call: int) -> tff.Computation:
  """`rounds_per_call` rounds of `process` (built by `process.build_federated_process`)."""
  if rounds_per_call < 1:
    raise ValueError(f'rounds_per_call must be >= 1, got {rounds_per_call}.')
  missing = [p for p in _PIECES if not hasattr(process, p)]
  if missing:
    raise ValueError(
        'rounds_per_call > 1 needs a process built by algorithms.process.build_federated_process '
        f'(this one lacks {", ".join(missing)}); set rounds_per_call = 1 for it.')
  k = rounds_per_call
  data_type = tff.StructType([process.data_type] * k)

  @tff.federated_computation(process.state_type,
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_k(state, client_data):
    metrics = []
    for r in range(k):
      params = tff.federated_broadcast(tff.federated_map(process.get_params, state))
      outputs = tff.federated_map(process.client_update, (params, client_data[r]))
      total = tff.federated_sum(outputs)
      state = tff.federated_map(process.server_update, (state, total))
      metrics.append(tff.federated_map(process.round_metrics, total))
    return state, tff.federated_zip(metrics)

  return next_k


def stack_rounds(batches: Sequence[Sequence]) -> List[Tuple]:
  """[round][client] data -> [client] tuples of that client's data per round."""
  sizes = {len(b) for b in batches}
  if len(sizes) != 1:
    raise ValueError(f'Every round of one call needs the same number of clients, got {sizes}.')
  return [tuple(b[i] for b in batches) for i in range(sizes.pop())]


def chunk_end(last_done: int, rounds_per_call: int, must_stop: Callable[[int], bool]) -> int:
  """The last round of the call that starts after round `last_done`.

  The call stops at the first round r with `must_stop(r)` (evaluation,
  checkpoint and final rounds), so those rounds see the state.
  """
  end = last_done + 1
  while end < last_done + rounds_per_call and not must_stop(end):
    end += 1
  return end


class RoundRunner:
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
      self._computations[k] = build_multi_round_next(self.process, k)
    state, metrics = self._computations[k](state, stack_rounds(batches))
    return state, [collections.OrderedDict(m) if isinstance(m, dict) else m for m in metrics]


class ChunkedRounds:
  """A per-round view of rounds run `rounds_per_call` at a time (the training loop).

  `next(state, round_num)` at the first round of a call samples that call's
  rounds up front with `round_batch(r)` (seeded by round, so the clients are
  those of single rounds), runs them in one TFF call, and returns each
  round's metrics in turn. `state` is the state after the latest call: it is
  returned unchanged until the call's last round, which `must_stop(r)` makes
  every evaluation and checkpoint round.
  """

  def __init__(self, process, rounds_per_call: int, round_batch: Callable[[int], Sequence],
               must_stop: Callable[[int], bool]):
    self.runner = RoundRunner(process, rounds_per_call)
    self._round_batch = round_batch
    self._must_stop = must_stop
    self._pending: Dict[int, object] = {}
    self._end, self._state = 0, None

  def next(self, state, round_num: int, inputs: Optional[Sequence] = None):
    """Round `round_num`'s (state, metrics); `inputs = (batch,)` is that round's data when the
    caller has it already (the other rounds of a chunk come from `round_batch`)."""
    if round_num not in self._pending:
      self._end = chunk_end(round_num - 1, self.runner.rounds_per_call, self._must_stop)
      rounds = range(round_num, self._end + 1)
      batches = [inputs[0] if inputs is not None and r == round_num else self._round_batch(r)
                 for r in rounds]
      self._state, metrics = self.runner.run(state, batches)
      self._pending = dict(zip(rounds, metrics))
    metrics = self._pending.pop(round_num)
    return (self._state if round_num == self._end else state), metrics

  def close(self) -> None:
    """Nothing to release (the same interface as `runtime.resident.ResidentRounds`)."""
