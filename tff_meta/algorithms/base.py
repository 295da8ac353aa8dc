"""What an algorithm builder returns (`FederatedProcess`, `Algorithm`), and the registry
entry that owns an algorithm.

An algorithm module (`tff_meta/algorithms/<name>.py`) holds the whole
definition of its algorithms: the client work, a frozen hparams dataclass
(`algorithms.hparams`), the FLOPs of one client's round next to the client
work they count, and its `AlgorithmEntry` in `ALGORITHMS`, which binds them.
Nothing outside the module needs the algorithm's name.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Callable, Mapping, Optional

import tensorflow_federated as tff

from tff_meta.algorithms import hparams as hparams_lib
from tff_meta.evaluation import flops
from tff_meta.core.registry import Registry


class FederatedProcess(tff.templates.IterativeProcess):
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
    the per-client step `client_work` around the algorithm's `client_fn`, `weighting`,
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
  client_work: Callable
  weighting: str
  server_optimizer: Any

  def __init__(self, initialize: tff.Computation, next_fn: tff.Computation, *,
               get_model_weights: tff.Computation, params_type: tff.Type, data_type: tff.Type,
               client_output_type: tff.Type, client_update: tff.Computation,
               server_update: Optional[tff.Computation], round_metrics: Optional[tff.Computation],
               initial_params: Mapping[str, Any], client_work: Callable,
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
    self.client_work = client_work
    self.weighting = weighting
    self.server_optimizer = server_optimizer

  @property
  def stateful(self) -> bool:
    """Whether clients keep state between rounds (`algorithms.stateful`)."""
    return self.client_state_type is not None


@dataclasses.dataclass
class Algorithm:
  """A built algorithm: the training process plus its personalized evaluation.

  Attributes:
    name: registry name, e.g. 'fedmeta_maml'.
    display_name: the paper's name, e.g. 'FedMeta(MAML)'.
    process: the training process (`FederatedProcess`).
    evaluate: federated evaluation (see `evaluation.personalized`).
    train_data: 'episode' (support/query tensors) or 'full' (x, y = all data).
    client_flops: optional `fn(one client's round data) -> int`, the FLOPs of
      that client's work in a round (`tff_meta.evaluation.flops`); None when
      the algorithm has no FLOPs model.
    num_candidates: for algorithms with client state
      (`algorithms.stateful`): how many stored client states `evaluate`
      receives for new clients to choose from (LG-FedAvg's test, report 003
      Sec. 5.2); `evaluate` then takes (params, candidates, client_states,
      episodes).
  """
  process: FederatedProcess
  evaluate: tff.Computation
  train_data: str
  name: str = ''
  display_name: str = ''
  client_flops: Optional[Callable[[Any], int]] = None
  num_candidates: int = 1

  @property
  def stateful(self) -> bool:
    """Whether clients keep state between rounds (`algorithms.stateful`)."""
    return self.process.stateful

  @staticmethod
  def params(state) -> collections.OrderedDict:
    return state['params']


def build_optimizer(name: str, learning_rate: float):
  return OPTIMIZERS.get(name)(learning_rate)


OPTIMIZERS: Registry = hparams_lib.OPTIMIZERS   # declared there: the hparams' check reads it
OPTIMIZERS.add('sgd', lambda lr: tff.learning.optimizers.build_sgdm(learning_rate=lr))
OPTIMIZERS.add('momentum', lambda lr: tff.learning.optimizers.build_sgdm(learning_rate=lr, momentum=0.9))
# Client loops step TFF's Adam in place with the fused kernel (learning/local_training.py).
OPTIMIZERS.add('adam', lambda lr: tff.learning.optimizers.build_adam(learning_rate=lr))

# (hparams, model cost, num_support, num_query, num_examples) -> FLOPs of one client's round.
RoundFlops = Callable[[Any, flops.ModelCost, int, int, int], int]


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
  """One registered algorithm, as its module defines it.

  Calling the entry builds the algorithm: `ALGORITHMS.get(name)(model, hp,
  model_aggregator=None)`, with `hp` an instance of `hparams`, a mapping of
  its fields, or any dataclass holding them (a config's `[hparams]` table,
  of which it takes the fields it reads); None = the defaults.

  Attributes:
    name: registry name, e.g. 'fedmeta_maml'.
    display_name: the paper's name, e.g. 'FedMeta(MAML)'.
    hparams: the frozen dataclass of the hyperparameters it reads
      (`algorithms.hparams`); its `validate()` runs before `build`.
    build: `(model, hp, model_aggregator) -> Algorithm` (name, display
      name and FLOPs are filled in by the entry).
    description: one line for README's catalog (`tff_meta.catalog`).
    source: the paper, as named in README's paper list.
    round_flops: FLOPs of one client's round (`RoundFlops`), or None when
      the algorithm has no FLOPs model.
    scored_also_as: another entry that trains with the same process and state
      and only evaluates differently (FedAvg -> FedAvg(Meta)); a run of this
      one can be re-evaluated as that one (`classification.reevaluation`).
  """
  name: str
  display_name: str
  hparams: type
  build: Callable[..., Algorithm]
  description: str = ''
  source: str = '—'
  round_flops: Optional[RoundFlops] = None
  scored_also_as: str = ''

  def make_hparams(self, hp=None):
    """`hp` as this algorithm's dataclass (see the class docstring)."""
    if isinstance(hp, self.hparams):
      return hp
    if hp is None:
      return self.hparams()
    if isinstance(hp, Mapping):
      return self.hparams.from_values(hp)
    return self.hparams.from_values(dataclasses.asdict(hp), strict=False)

  def __call__(self, model, hp=None, model_aggregator=None) -> Algorithm:
    hp = self.make_hparams(hp)
    hp.validate()
    alg = self.build(model, hp, model_aggregator=model_aggregator)
    cost = None if self.round_flops is None else flops.client_flops_fn(
        functools.partial(self.round_flops, hp), model)
    return dataclasses.replace(alg, name=self.name, display_name=self.display_name,
                               client_flops=cost)


def variant_entries(build: Callable, hparams: type, source: str, variants,
                    round_flops: Optional[Callable] = None) -> list:
  """One `AlgorithmEntry` per (variant, name, display_name, description) of a family whose
  `build` and `round_flops` take the variant (`build(..., variant=v)`, `round_flops(v, ...)`)."""
  return [AlgorithmEntry(name, display_name, hparams, functools.partial(build, variant=variant),
                         description=description, source=source,
                         round_flops=round_flops and functools.partial(round_flops, variant))
          for variant, name, display_name, description in variants]


def register(*entries: AlgorithmEntry) -> None:
  """Adds `entries` to `ALGORITHMS` (each algorithm module calls this once)."""
  for entry in entries:
    ALGORITHMS.add(entry.name, entry)


def fedavg_server_optimizer(hp):
  """The FedAvg family's server step, from `hparams.FedAvgServer`'s fields."""
  return build_optimizer(hp.fedavg_server_optimizer, hp.fedavg_server_lr)


def meta_server_optimizer(hp):
  """FedMeta's outer step, from `hparams.MetaServer`'s fields."""
  return build_optimizer(hp.server_optimizer, hp.server_lr)


def client_optimizer(hp):
  """The local optimizer, from `hparams.LocalTraining`'s fields."""
  return build_optimizer(hp.client_optimizer, hp.client_lr)


def registered_hparams() -> type:
  """The union of the registered algorithms' hparams (`hparams.table`): a config's `[hparams]`."""
  return hparams_lib.table(ALGORITHMS.get(name).hparams for name in ALGORITHMS)


def readers(field_name: str) -> list:
  """The registered algorithms whose hparams have `field_name`."""
  return [name for name in ALGORITHMS
          if field_name in {f.name for f in dataclasses.fields(ALGORITHMS.get(name).hparams)}]


# name -> AlgorithmEntry
ALGORITHMS: Registry = Registry('algorithm')
