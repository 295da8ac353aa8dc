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

from tff_meta.algorithms import hparams
from tff_meta.core.fields import above, at_least, declared, field, one_of
from tff_meta.core.registry import Registry
from tff_meta.fewround.meta_update import META_UPDATES


# The prototype rules by name; `process` registers them (it builds the computations they pick).
TEST_PROTOTYPES: Registry = Registry('test prototype rule')
TRAIN_PROTOTYPES: Registry = Registry('training prototype rule')


@dataclasses.dataclass
class FewRoundHparams:
  """FRL hyperparameters (paper Sec. 4: alpha 0.1, beta 0.01 Adam, E 1, R 3), declared once:
  `FewRoundConfig` has the same keys (`fields.declared`), the shared ones come from
  `algorithms.hparams`, and the defaults are the config's."""
  rounds: int = field(3, 'R: communication rounds per meta-training episode (an episode is '
                      '1 + R rounds).', at_least(1))
  local_steps: int = declared(hparams.LocalSteps, 'local_steps', 1)        # E
  inner_lr: float = declared(hparams.InnerRate, 'inner_lr', 0.1)           # alpha
  gamma: float = field(0.1, 'GPAL weight (Eq. 4) of the frl_distance_gpal method.',
                       at_least(0))
  server_optimizer: str = declared(hparams.MetaServer, 'server_optimizer')  # the meta-update's
  server_lr: float = declared(hparams.MetaServer, 'server_lr', 0.01)       # beta
  server_lr_decay_episode: int = field(
      5000, 'Divide beta by 10 from this episode on (0: never).', at_least(0))
  local_adaptation: bool = field(False, 'Appendix C\'s personalization scheme: local support '
                                 'updates, then a local meta-update per client.')
  head_lr: float = field(0.0, 'Local SGD rate of the linear head (frl_linear, fedavg, '
                         'finetune_*); 0: inner_lr.', at_least(0))
  zero_head: bool = field(False, 'Start the linear head at zero in every episode and test run '
                          '(frl_linear, fedavg, finetune_*).')
  meta_update: str = field(
      'client_adam', 'FRL meta-update (Alg. 1 lines 24-26): client_adam = one Adam step per '
      'client from a shared state, models and Adam slots averaged; server_adam = one server '
      'Adam step on the mean first-order meta-gradient.', one_of(META_UPDATES))
  test_prototypes: str = field(
      'previous', 'Prototypes the distance classifier scores test queries with after R '
      'rounds: previous = P_{R-1}, computed at theta_{R-1} (the paper, Sec. 3.3); recomputed = '
      'P_R, computed by the clients at theta_R on their support sets (one more prototype '
      'upload). Deployment only; meta-training uses what train_prototypes names.',
      one_of(TEST_PROTOTYPES))
  train_prototypes: str = field(
      'previous', 'Prototypes of the FRL meta-objective\'s query loss (Alg. 1 line 24): '
      'previous = P_{R-1} (the paper); recomputed = P_R at theta_R, as test_prototypes = '
      'recomputed scores (one more prototype upload per episode).',
      one_of(TRAIN_PROTOTYPES))
  head_meta_lr_scale: float = field(1.0, 'The meta-update\'s step to the head\'s weights, '
                                    'times this.', above(0))


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
