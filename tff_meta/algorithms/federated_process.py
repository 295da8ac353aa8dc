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
- `grouped()`: the same round with groups of clients as its CLIENTS values
  (`algorithms.grouped`; `is_grouped` marks such a process);
  `steps_in_place`: one client's work steps a fused Adam in graph variables
  (`learning.fused_adam`), which a group's loop cannot, so it is slower grouped;
- `pieces`: the round's TFF computations for runners that recombine them
  (`runtime.pool_resident`); None when the round cannot
  be recombined that way (client state, or a `model_aggregator`);
- the pure-TF definition behind the computations (`client_fn`,
  `weighting`, `server_optimizer`), for plain-TF references
  (`benchmarks/round_overhead.py`).

Personalized evaluation is built by each algorithm module from
`params_type` and kept next to the process in `base.Algorithm.evaluate`.

Type signatures (P = params, D = one client's data, C = one client's state,
M = metrics):
    initialize: ( -> S@SERVER)
    next: (<S@SERVER, {D}@CLIENTS> -> <S@SERVER, M@SERVER>), or with client state
          (<S@SERVER, {C}@CLIENTS, {D}@CLIENTS> -> <S@SERVER, {C}@CLIENTS, M@SERVER>)
    get_model_weights: (S -> P)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import tensorflow_federated as tff


@dataclasses.dataclass(frozen=True)
class RoundPieces:
  """The TFF computations one round of the plain weighted mean is made of.

  Type signatures (S = state, P = params, D = one client's data, T = one
  client's contribution, M = metrics):
      get_params: (S -> P)
      client_update: (<P, D> -> T)
      server_update: (<S, T> -> S)       (T summed over the round's clients)
      round_metrics: (T -> M)
  """
  data_type: tff.Type
  get_params: tff.Computation
  client_update: tff.Computation
  server_update: tff.Computation
  round_metrics: tff.Computation


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
  pieces: Optional[RoundPieces]
  client_fn: Callable
  weighting: str
  server_optimizer: Any

  def __init__(self, initialize: tff.Computation, next_fn: tff.Computation, *,
               get_model_weights: tff.Computation, params_type: tff.Type, data_type: tff.Type,
               client_output_type: tff.Type, client_update: tff.Computation,
               client_fn: Callable, weighting: str, server_optimizer: Any,
               client_state_type: Optional[tff.Type] = None,
               initial_client_state: Optional[Mapping[str, Any]] = None,
               model_aggregator: Optional[Any] = None,
               pieces: Optional[RoundPieces] = None, is_grouped: bool = False,
               steps_in_place: bool = False,
               grouped_builder: Optional[Callable[[], 'FederatedProcess']] = None):
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
    self.pieces = pieces
    self.client_fn = client_fn
    self.weighting = weighting
    self.server_optimizer = server_optimizer
    self.is_grouped = is_grouped
    self.steps_in_place = steps_in_place
    self._grouped_builder = grouped_builder
    self._grouped = None

  def grouped(self) -> 'FederatedProcess':
    """This round with several clients per TFF call (`algorithms.grouped`), built once.

    Its CLIENTS values are groups of clients (`grouped.pack_groups`), with
    their states stacked (`grouped.stack_states`); same state and results.
    Raises `grouped.GroupingError` for a process with a `model_aggregator`.
    """
    if self.is_grouped:
      return self
    if self._grouped is None:
      if self._grouped_builder is None:
        from tff_meta.algorithms import grouped  # pylint: disable=g-import-not-at-top
        grouped.refuse_aggregator()
      self._grouped = self._grouped_builder()
    return self._grouped

  @property
  def stateful(self) -> bool:
    """Whether clients keep state between rounds (`algorithms.stateful`)."""
    return self.client_state_type is not None
