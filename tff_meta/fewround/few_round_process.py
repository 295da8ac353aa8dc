"""The typed process of few-round meta-training, as `FederatedProcess` is for the other algorithms.

Park et al., "Few-Round Learning for Federated Learning", Algorithm 1.
`process.build_meta_training` returns a `FewRoundProcess`: a
`tff.templates.IterativeProcess` whose `next` is one episode (R rounds, then
the meta-update), with its parts declared here rather than attached at run
time, so a reader (and a type checker) sees what every few-round process has.
With W = weights, S = the server state <phi=W, optimizer_state, episode> and
G = a round's state <theta=W, protos, mask, has_protos>:

- `start`: (S -> G), tensorflow: theta_0 = phi;
- `round`: (<G@SERVER, {D}@CLIENTS> -> <G@SERVER, metrics@SERVER>), one
  communication round (Alg. 1 lines 5-21);
- `refresh`: (<G@SERVER, {D}@CLIENTS> -> G@SERVER), the prototypes the
  meta-objective uses (`process.TRAIN_PROTOTYPES`);
- `meta_update`: (<S@SERVER, G@SERVER, {D}@CLIENTS> -> <S@SERVER,
  metrics@SERVER>), lines 22-26;
- `evaluate`, `start_weights`: deployment's scoring and its theta_0
  (`process.build_round`);
- `hparams`, `model`: what the process was built from.

`process.run_episode` calls the parts one by one, one federated computation
per round, which is what worker pools need; `next` chains them in one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow_federated as tff


@dataclasses.dataclass
class FewRoundHparams:
  """FRL hyperparameters (paper Sec. 4: alpha 0.1, beta 0.01 Adam, E 1, R 3), named as the
  config's keys (`FewRoundConfig.hparams`)."""
  rounds: int = 3                    # R
  local_steps: int = 1               # E
  inner_lr: float = 0.1              # alpha
  gamma: float = 0.0                 # GPAL weight (0: no GPAL)
  server_optimizer: str = 'adam'     # the meta-update's optimizer
  server_lr: float = 0.01            # beta
  server_lr_decay_episode: int = 0   # beta / 10 from this episode on (0: never)
  local_adaptation: bool = False     # Appendix C personalization scheme
  head_lr: float = 0.0               # alpha of the linear head's weights (0: alpha)
  zero_head: bool = False            # the linear head starts each episode at zero
  meta_update: str = 'client_adam'   # META_UPDATES: client_adam (line 24 per client), server_adam
  test_prototypes: str = 'previous'  # TEST_PROTOTYPES: the prototypes `evaluate` scores with
  train_prototypes: str = 'previous' # TRAIN_PROTOTYPES: the prototypes of the meta-objective
  head_meta_lr_scale: float = 1.0    # the meta-update's step to the head's weights, times this


class FewRoundProcess(tff.templates.IterativeProcess):
  """FRL meta-training: `initialize`, `next` (one episode) and the parts above."""

  def __init__(self, initialize: tff.Computation, next_fn: tff.Computation, *,
               start: tff.Computation, round_fn: tff.Computation,
               meta_update: tff.Computation, refresh: tff.Computation,
               evaluate: tff.Computation, start_weights: tff.Computation,
               hparams: Any, model: Any):
    super().__init__(initialize, next_fn)
    self.start, self.round, self.meta_update, self.refresh = start, round_fn, meta_update, refresh
    self.evaluate, self.start_weights = evaluate, start_weights
    self.hparams, self.model = hparams, model
