"""Several rounds in one TFF invocation (`rounds_per_call`, issue #8).

A TFF round on the FEMNIST CNN spends most of its time moving the server
state (theta plus the server optimizer's slots, ~79 MB with Adam) from Python
to the C++ worker: TFF serializes every argument of every call. Running k
rounds per call moves the state once per k rounds. The k rounds are the
single round of `process.py` unrolled k times in one
`tff.federated_computation`, with the same TFF pieces (`process.pieces`:
`get_params`, `client_update`, `server_update`, `round_metrics`), so the
math is exactly that of k calls to `process.next` (FedMeta Alg. 1, one outer
step per round):

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
form: it runs on one worker, not on a worker pool. It is the algorithm's
round unrolled (built from the process's declared `pieces` only, with its own
type signature below), so it lives with the round; `runtime/chunked.py`
decides when to call it.

Type signature (S = state, D = one client's data, M = round metrics):
    next_k: (<S@SERVER, {<D,...,D>}@CLIENTS> -> <S@SERVER, <M,...,M>@SERVER>)
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import tensorflow_federated as tff


def build_multi_round_next(process, rounds_per_call: int) -> tff.Computation:
  """`rounds_per_call` rounds of `process` (built by `process.build_federated_process`)."""
  if rounds_per_call < 1:
    raise ValueError(f'rounds_per_call must be >= 1, got {rounds_per_call}.')
  pieces = getattr(process, 'pieces', None)
  if pieces is None:
    raise ValueError(
        'rounds_per_call > 1 needs a process built by algorithms.process.build_federated_process '
        'without a model_aggregator (this one lacks its round pieces); set rounds_per_call = 1 '
        'for it.')
  k = rounds_per_call
  data_type = tff.StructType([pieces.data_type] * k)

  @tff.federated_computation(process.state_type,
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_k(state, client_data):
    metrics = []
    for r in range(k):
      params = tff.federated_broadcast(tff.federated_map(pieces.get_params, state))
      outputs = tff.federated_map(pieces.client_update, (params, client_data[r]))
      total = tff.federated_sum(outputs)
      state = tff.federated_map(pieces.server_update, (state, total))
      metrics.append(tff.federated_map(pieces.round_metrics, total))
    return state, tff.federated_zip(metrics)

  return next_k


def stack_rounds(batches: Sequence[Sequence]) -> List[Tuple]:
  """[round][client] data -> [client] tuples of that client's data per round."""
  sizes = {len(b) for b in batches}
  if len(sizes) != 1:
    raise ValueError(f'Every round of one call needs the same number of clients, got {sizes}.')
  return [tuple(b[i] for b in batches) for i in range(sizes.pop())]
