"""The typed process every algorithm builder returns.

In the spirit of TFF's `tff.learning.templates.LearningProcess`: an
`IterativeProcess` (`initialize`, `next`, `state_type`) that also declares
what the rest of the project reads from it, instead of attributes attached
at run time:

- `get_model_weights`: state -> the broadcast params (θ, and Meta-SGD's α);
  LearningProcess's name for it;
- the round's types: `params_type` (the broadcast), `data_type` (one
  client's round data), `client_output_type` (one client's contribution to
  the sum, which `evaluation.communication` sizes);
- `client_update`: the client's TFF computation (tests call it alone);
- client state (`algorithms.stateful`): `client_state_type` and
  `initial_client_state`, both None for a process without it (`stateful`);
- the aggregation: `model_aggregator` (a `tff.aggregators` factory for the
  update, None = the weighted mean in the round's single `federated_sum`);
- `server_update` (the server step on the summed contributions) and
  `round_metrics` (the sum -> the round's metrics); both None with a
  `model_aggregator`, whose own process takes the update;
- the pure-TF definition behind the computations (`initial_params`,
  `client_fn`, the per-client step `client_work`, `weighting`,
  `server_optimizer`), for plain-TF references (`benchmarks/round_overhead.py`)
  and for the execution plan, which builds the same round for other call
  shapes (`runtime/execution_plan.py`).

Nothing here is about how a round executes (clients per call, resident
state, memory): the execution plan decides that from these parts.

Personalized evaluation is built by each algorithm module from
`params_type` and kept next to the process in `base.Algorithm.evaluate`.

Type signatures (P = params, D = one client's data, C = one client's state,
M = metrics):
    initialize: ( -> S@SERVER)
    next: (<S@SERVER, {D}@CLIENTS> -> <S@SERVER, M@SERVER>), or with client state
          (<S@SERVER, {C}@CLIENTS, {D}@CLIENTS> -> <S@SERVER, {C}@CLIENTS, M@SERVER>)
    get_model_weights: (S -> P)
    client_update: (<P, D> -> T), or (<P, C, D> -> <T, C>) with client state
    server_update: (<S, T> -> S)       (T summed over the round's clients)
    round_metrics: (T -> M)
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import tensorflow_federated as tff


class FederatedProcess(tff.templates.IterativeProcess):
  """An algorithm's training process with its declared parts (module docstring)."""

  get_model_weights: tff.Computation
  params_type: tff.Type
  data_type: tff.Type
  client_output_type: tff.Type
  client_update: tff.Computation
  client_state_type: Optional[tff.Type]
  initial_client_state: Optional[Mapping[str, Any]]
  model_aggregator: Optional[Any]
  server_update: Optional[tff.Computation]
  round_metrics: Optional[tff.Computation]
  initial_params: Mapping[str, Any]
  client_fn: Callable
  client_work: Callable
  weighting: str
  server_optimizer: Any

  def __init__(self, initialize: tff.Computation, next_fn: tff.Computation, *,
               get_model_weights: tff.Computation, params_type: tff.Type, data_type: tff.Type,
               client_output_type: tff.Type, client_update: tff.Computation,
               server_update: Optional[tff.Computation], round_metrics: Optional[tff.Computation],
               initial_params: Mapping[str, Any], client_fn: Callable, client_work: Callable,
               weighting: str, server_optimizer: Any,
               client_state_type: Optional[tff.Type] = None,
               initial_client_state: Optional[Mapping[str, Any]] = None,
               model_aggregator: Optional[Any] = None):
    super().__init__(initialize, next_fn)
    if (client_state_type is None) != (initial_client_state is None):
      raise ValueError('client_state_type and initial_client_state go together.')
    self.get_model_weights = get_model_weights
    self.params_type = params_type
    self.data_type = data_type
    self.client_output_type = client_output_type
    self.client_update = client_update
    self.client_state_type = client_state_type
    self.initial_client_state = initial_client_state
    self.model_aggregator = model_aggregator
    self.server_update = server_update
    self.round_metrics = round_metrics
    self.initial_params = initial_params
    self.client_fn = client_fn
    self.client_work = client_work
    self.weighting = weighting
    self.server_optimizer = server_optimizer

  @property
  def stateful(self) -> bool:
    """Whether clients keep state between rounds (`algorithms.stateful`)."""
    return self.client_state_type is not None
