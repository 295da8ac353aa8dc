"""Per-algorithm hyperparameters: small frozen dataclasses that carry their help and checks.

Each algorithm module declares the dataclass of the hyperparameters it reads
(as FedJAX does per algorithm), built from the shared groups below and its
own fields, and names it in its registry entry (`base.AlgorithmEntry`). A
field is made by `field(default, help, check)` (`tff_meta.core.fields`, the
declaration of every config key too): its help text is the flag's help and
the docs' description, its `check` the range the config enforces
(`fields.check_fields`). Checks that relate several fields belong to the
dataclass's `validate()`, which the entry runs before building.

Names follow FedMeta (alpha = inner_lr, beta = server_lr). A name means the
same thing, with the same default, in every algorithm that reads it; a
task's config that has the same setting uses this declaration
(`fields.declared`), with its own default at most; a
config's `[hparams]` table is the union of every registered algorithm's
fields (`table`), so one config can set the hparams of all the methods a
comparison runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, Mapping, Tuple

# The one declaration of a config key or hparam, and its checks (re-exported for the
# algorithm modules: `hparams.field(..., hparams.at_least(1))`).
from tff_meta.core.fields import (Check, above, at_least, between, check_of, field,  # noqa: F401
                                  help_of, one_of, registered)
from tff_meta.core.registry import Registry

WEIGHTINGS = ('', 'uniform', 'num_examples')


# The optimizers by name; `base` registers them (it imports TFF, this module does not).
OPTIMIZERS: Registry = Registry('optimizer')

# A registered optimizer name; an unknown one is the registry's error (the closest name).
OPTIMIZER = registered(lambda: OPTIMIZERS)


@dataclasses.dataclass(frozen=True)
class Base:
  """Fields every algorithm reads."""
  weighting: str = field('', 'Client weighting: uniform or num_examples; empty = the '
                         'algorithm\'s default.', one_of(WEIGHTINGS))

  def validate(self) -> None:
    """Checks across fields, raising a ValueError naming the hparam (none by default)."""

  def for_run(self, *, num_train_clients: int, clients_per_round: int) -> 'Base':
    """These hparams with the values a run fills in from its data and config (none by default)."""
    del num_train_clients, clients_per_round
    return self

  @classmethod
  def from_values(cls, values: Mapping[str, Any], strict: bool = True):
    """`cls` from a flat mapping; `strict`: a key it does not read is a ValueError naming them."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if strict and unknown:
      raise ValueError(f'{cls.__name__} has no hparam {", ".join(unknown)}; known: '
                       f'{", ".join(sorted(known))}.')
    return cls(**{k: v for k, v in values.items() if k in known})


@dataclasses.dataclass(frozen=True)
class BatchSize:
  batch_size: int = field(10, 'FedAvg / fine-tuning minibatch size.', at_least(1))


@dataclasses.dataclass(frozen=True)
class ClientRate:
  client_lr: float = field(0.0001, 'FedAvg local learning rate (and FedAvg(Meta) fine-tuning '
                           'rate; FedMeta+FedPer: the personal layers\' rate).', above(0))


@dataclasses.dataclass(frozen=True)
class LocalTraining(Base, BatchSize, ClientRate):
  """Minibatch training on a client's data with the client optimizer (FedAvg's local work)."""
  client_optimizer: str = field('adam', 'FedAvg local optimizer, also used by FedAvg(Meta) '
                                'fine-tuning: sgd, momentum, adam.', OPTIMIZER)
  local_epochs: int = field(1, 'FedAvg local epochs per round.', at_least(1))


@dataclasses.dataclass(frozen=True)
class FedAvgServer:
  """The server step of the FedAvg family (SGD at 1.0 = the average of the local models)."""
  fedavg_server_optimizer: str = field('sgd', 'FedAvg server optimizer (sgd at 1.0 = model '
                                       'averaging).', OPTIMIZER)
  fedavg_server_lr: float = field(1.0, 'FedAvg server learning rate.', above(0))


@dataclasses.dataclass(frozen=True)
class MetaServer:
  """FedMeta's outer step: beta with SGD (Alg. 1) or Adam (Appendix A.2)."""
  server_optimizer: str = field('adam', 'Server (outer) optimizer of the meta-update: sgd '
                                '(FedMeta Alg. 1), momentum or adam (FedMeta Appendix A.2).',
                                OPTIMIZER)
  server_lr: float = field(0.0001, 'beta: the server (outer) learning rate of the meta-update.',
                           above(0))


@dataclasses.dataclass(frozen=True)
class EvalSteps:
  """The inner steps of personalization at evaluation."""
  eval_inner_steps: int = field(-1, 'Inner steps at evaluation; -1 = inner_steps.',
                                at_least(-1))

  def eval_steps(self, default: int) -> int:
    """`eval_inner_steps`, or the algorithm's `default` where it is -1."""
    return self.eval_inner_steps if self.eval_inner_steps >= 0 else default


@dataclasses.dataclass(frozen=True)
class InnerRate:
  inner_lr: float = field(0.001, 'alpha: the inner-loop (local) SGD rate on a client\'s support '
                          'set (Meta-SGD: its initial value).', above(0))


@dataclasses.dataclass(frozen=True)
class InnerLoop(InnerRate, EvalSteps):
  """MAML's inner loop: alpha and the unrolled steps, in training and at evaluation."""
  inner_steps: int = field(1, 'Inner SGD steps on a client\'s support set during '
                           'meta-training.', at_least(1))


@dataclasses.dataclass(frozen=True)
class LocalSteps:
  """Per-FedAvg's tau and pFedMe's R."""
  local_steps: int = field(10, 'Local steps per round: Per-FedAvg tau and pFedMe R (each on '
                           'fresh minibatches of batch_size), few-round learning E (on the '
                           'support set).', at_least(1))


def _merge_fields(classes: Iterable[type]) -> Dict[str, Tuple[dataclasses.Field, list]]:
  merged: Dict[str, Tuple[dataclasses.Field, list]] = {}
  for cls in classes:
    for f in dataclasses.fields(cls):
      if f.name in merged:
        known, owners = merged[f.name]
        if (known.type, known.default, help_of(known)) != (f.type, f.default,
                                                           help_of(f)):
          raise TypeError(f'hparam {f.name!r} of {cls.__name__} differs from that of '
                          f'{owners[0].__name__}; a name must mean one thing in every algorithm.')
        owners.append(cls)
      else:
        merged[f.name] = (f, [cls])
  return merged


def table(classes: Iterable[type], name: str = 'Hparams') -> type:
  """The union of `classes`' fields as one frozen dataclass: a config's `[hparams]` table.

  A field several classes declare must be declared alike (type, default and
  help); `TypeError` otherwise.
  """
  merged = _merge_fields(classes)
  fields = [(n, f.type, dataclasses.field(default=f.default, metadata=f.metadata))
            for n, (f, _) in sorted(merged.items())]
  return dataclasses.make_dataclass(name, fields, frozen=True)
