"""What an algorithm builder returns, and the hyperparameters every builder reads."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Optional

import numpy as np
import tensorflow_federated as tff

from tff_meta.registry import Registry


@dataclasses.dataclass
class Hparams:
  """Hyperparameters; names follow FedMeta (alpha = inner_lr, beta = server_lr)."""
  inner_lr: float = 0.001            # alpha
  inner_steps: int = 1
  eval_inner_steps: int = -1         # -1: same as inner_steps
  server_optimizer: str = 'adam'     # FedMeta Appendix A.2 uses Adam
  server_lr: float = 0.0001          # beta
  fedavg_server_optimizer: str = 'sgd'  # FedAvg: SGD at 1.0 = plain model averaging
  fedavg_server_lr: float = 1.0
  client_optimizer: str = 'adam'     # FedAvg local optimizer (Appendix A.2)
  client_lr: float = 0.0001
  local_epochs: int = 1
  batch_size: int = 10
  finetune_epochs: int = 1           # FedAvg(Meta) fine-tuning on support
  weighting: str = ''                # '' = the algorithm's default


@dataclasses.dataclass
class Algorithm:
  """A built algorithm: the training process plus its personalized evaluation.

  Attributes:
    name: registry name, e.g. 'fedmeta_maml'.
    display_name: the paper's name, e.g. 'FedMeta(MAML)'.
    process: `tff.templates.IterativeProcess` (see `algorithms.process`).
    evaluate: federated evaluation (see `evaluation.personalized`).
    train_data: 'episode' (support/query tensors) or 'full' (x, y = all data).
    client_flops: optional `fn(one client's round data) -> int`, the FLOPs of
      that client's work in a round (`tff_meta.evaluation.flops`); None when
      the algorithm has no FLOPs model.
  """
  name: str
  display_name: str
  process: tff.templates.IterativeProcess
  evaluate: tff.Computation
  train_data: str
  client_flops: Optional[Callable[[Any], int]] = None

  @staticmethod
  def params(state) -> collections.OrderedDict:
    return state['params']


def build_optimizer(name: str, learning_rate: float):
  return OPTIMIZERS.get(name)(learning_rate)


OPTIMIZERS: Registry = Registry('optimizer')
OPTIMIZERS.add('sgd', lambda lr: tff.learning.optimizers.build_sgdm(learning_rate=lr))
OPTIMIZERS.add('momentum', lambda lr: tff.learning.optimizers.build_sgdm(learning_rate=lr, momentum=0.9))
OPTIMIZERS.add('adam', lambda lr: tff.learning.optimizers.build_adam(learning_rate=lr))

# name -> builder(model: ModelSpec, hparams: Hparams) -> Algorithm
ALGORITHMS: Registry = Registry('algorithm')
