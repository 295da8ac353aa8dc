"""What an algorithm builder returns, and the hyperparameters every builder reads."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Optional

import numpy as np
import tensorflow_federated as tff

from tff_meta.algorithms.federated_process import FederatedProcess
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
  # Personalized FL (issue #4). FedEC (Lan et al.): alpha, tau = local_epochs,
  # eps_in = client_lr, eps_out = server_lr with server_optimizer = 'sgd'.
  constraint_weight: float = 1.0     # FedEC alpha (Eq. 6, 11); FedEC-l2's L2 weight
  personal_layers: str = '-1'        # model split: layers kept on the client (models/split.py)
  new_client_candidates: int = 8     # LG-FedAvg test: stored local parts a new client tries
  head_epochs: int = 10              # FedRep: head epochs before the body's local_epochs
  personal_epochs: int = 1           # Ditto: epochs on the personal model v_i
  ditto_lambda: float = 0.1          # Ditto lambda (proximal weight to the global model)
  apfl_alpha: float = 0.5            # APFL initial mixing weight alpha_i
  population: int = 0                # N training clients (SCAFFOLD's |S|/N); 0 = from the data
  sampled_clients: int = 0           # |S| clients per round (SCAFFOLD's |S|/N); 0 = clients_per_round
  # Per-FedAvg (Fallah et al. 2020, Alg. 1): alpha = inner_lr; pFedMe (T. Dinh
  # et al. 2020, Alg. 1): beta = fedavg_server_lr; FedProx: local training as FedAvg.
  local_steps: int = 10              # Per-FedAvg tau / pFedMe R: local steps, one fresh batch each
  per_fedavg_beta: float = 0.001     # Per-FedAvg beta (local meta step)
  hf_delta: float = 0.001            # Per-FedAvg(HF) delta (finite-difference Hessian-vector product)
  prox_mu: float = 0.01              # FedProx mu (Li et al. 2020, Eq. 2)
  pfedme_lambda: float = 15.0        # pFedMe lambda (Eq. 2)
  pfedme_inner_steps: int = 5        # pFedMe K: steps solving theta_i (Eq. 7)
  pfedme_personal_lr: float = 0.01   # pFedMe: rate of those K steps
  pfedme_eta: float = 0.005          # pFedMe eta: local rate of w (Eq. 8)


@dataclasses.dataclass
class Algorithm:
  """A built algorithm: the training process plus its personalized evaluation.

  Attributes:
    name: registry name, e.g. 'fedmeta_maml'.
    display_name: the paper's name, e.g. 'FedMeta(MAML)'.
    process: the training process (`algorithms.federated_process`).
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
  name: str
  display_name: str
  process: FederatedProcess
  evaluate: tff.Computation
  train_data: str
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


OPTIMIZERS: Registry = Registry('optimizer')
OPTIMIZERS.add('sgd', lambda lr: tff.learning.optimizers.build_sgdm(learning_rate=lr))
OPTIMIZERS.add('momentum', lambda lr: tff.learning.optimizers.build_sgdm(learning_rate=lr, momentum=0.9))
OPTIMIZERS.add('adam', lambda lr: tff.learning.optimizers.build_adam(learning_rate=lr))

# name -> builder(model: ModelSpec, hparams: Hparams) -> Algorithm
ALGORITHMS: Registry = Registry('algorithm')
