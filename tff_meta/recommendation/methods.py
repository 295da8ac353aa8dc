"""The two trained method families shared by both tasks, as episode loops.

- `meta_learning`: FedMeta MAML / Meta-SGD (FedMeta Alg. 1; Chen et al. 2018b
  Alg. 1) through the same `fedmeta.build_fedmeta_process` TFF process as the
  image tasks, with the task's loss; one TFF round per episode, test users
  adapted and predicted by `evaluation.build_predict`.
- `pretraining`: one unified model pre-trained on training users, one plain-TF
  optimizer step on one sampled user per episode (NN(pre-trained), NN-unified).
Both checkpoint and record a curve (`loop.run_episodes`); `cfg.lr_schedule`
sets their outer rate (server_lr, pretrain_lr) episode by episode (`schedules`). With a `Selection`
(model selection on validation users, "early stopping"), the curve scores the
validation users, the state with the lowest validation metric is kept, and the
final (test) metrics are those of the kept state; the row records its episode.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.algorithms import base, fedmeta
from tff_meta.learning import step_scale
from tff_meta.data import client_data
from tff_meta.recommendation import evaluation, loop, schedules
from tff_meta.recommendation.training import Trainer


@dataclasses.dataclass
class MethodResult:
  """Final metrics of one method (or one row of it), its curve and its sizes (Table 5)."""
  method: str
  metrics: Dict[str, float]
  curve: List[Dict[str, float]] = dataclasses.field(default_factory=list)
  algorithm_params: int = 0
  model_params: int = 0
  selected_episode: Optional[int] = None   # the kept episode under model selection
  # The method's metrics on the users the curves score (model selection's validation users),
  # drawn as a horizontal line on Fig. 2 when it is a reference (the bias baseline); not a row.
  curve_reference: Optional[Dict[str, float]] = None
  # The scored (final or kept) weights of a pre-trained method, for a method that starts from
  # them (MAML(pre-trained start)); not a row.
  weights: Optional[List[np.ndarray]] = dataclasses.field(default=None, repr=False)

  def row(self) -> 'collections.OrderedDict':
    row = collections.OrderedDict(method=self.method, **self.metrics,
                                  algorithm_params=self.algorithm_params,
                                  model_params=self.model_params)
    if self.selected_episode is not None:
      row['selected_episode'] = self.selected_episode
    return row


@dataclasses.dataclass(frozen=True)
class Selection:
  """Model selection: the curve scores `users` (held-out validation users, never test users)
  and the state with the best `metric` (`mode` 'min' or 'max') is kept."""
  users: Sequence
  metric: str
  mode: str = 'min'


def _episodes(name, display, cfg, initial, step, evaluate, curve_users, selection, episodes,
              show_progress) -> Tuple[object, List[Dict[str, float]], Optional[int]]:
  """`loop.run_episodes` with or without selection: (final or kept state, curve, its episode)."""
  out = loop.run_episodes(
      name=display, initial_state=initial, step=step,
      evaluate=lambda s: evaluate(s, selection.users if selection else curve_users),
      episodes=episodes, eval_every=cfg.eval_every, checkpoint_every=cfg.checkpoint_every,
      output_dir=os.path.join(cfg.resolved_output_dir(), name), show_progress=show_progress,
      select=(selection.metric, selection.mode) if selection else None)
  if selection:
    return out[2].state, out[1], out[2].episode
  return out[0], out[1], None


def meta_learning(cfg, *, name: str, display: str, variant: str, model, loss,
                  train_batch: Callable[[int], list], test: Sequence, curve_test: Sequence,
                  score: Callable, show_progress: bool,
                  selection: Optional[Selection] = None,
                  step_scales: Optional[Sequence[float]] = None) -> MethodResult:
  """Meta-trains with the FedMeta process; `train_batch(episode)` gives its client values;
  scores `test` with the final state, or with the state `selection` keeps. `step_scales`
  (one float per model weight) multiplies the server step of each weight (`step_scale`)."""
  optimizer = base.build_optimizer(cfg.server_optimizer, cfg.server_lr)
  if step_scales is not None:
    optimizer = step_scale.scaled(optimizer, {'weights': list(step_scales)})
  process = fedmeta.build_fedmeta_process(
      model, variant=variant, inner_lr=cfg.inner_lr, inner_steps=cfg.inner_steps,
      server_optimizer=optimizer, loss=loss)
  predict = evaluation.build_predict(model, process.params_type, loss=loss,
                                     inner_lr=cfg.inner_lr, steps=cfg.adapt_steps)

  def evaluate(state, episodes):
    return score(predict(state['params'], evaluation.prediction_inputs(episodes)), episodes)

  def step(state, episode):
    state = collections.OrderedDict(state)
    state['optimizer_state'] = schedules.with_rate(
        state['optimizer_state'],
        schedules.rate(cfg.lr_schedule, cfg.server_lr, episode, cfg.episodes))
    return process.next(state, train_batch(episode))[0]

  state, curve, chosen = _episodes(name, display, cfg, process.initialize(), step, evaluate,
                                   curve_test, selection, cfg.episodes, show_progress)
  algorithm_params = int(sum(np.size(v) for vs in state['params'].values() for v in vs))
  return MethodResult(display, evaluate(state, test), curve, algorithm_params,
                      model.num_parameters, chosen)


def pretraining(cfg, *, name: str, display: str, model, trainer: Trainer, episodes: int,
                user_data: Callable[[int], tuple], evaluate: Callable, test: Sequence,
                curve_test: Sequence, show_progress: bool,
                selection: Optional[Selection] = None) -> MethodResult:
  """Pre-trains `model`: episode e takes one optimizer step on `user_data(e) = (x, y)`.

  `evaluate(weights, users)` scores the weights on those users; the final row scores `test`
  with the final weights, or with the weights `selection` keeps.
  """
  weights = [np.asarray(w) for w in model.initial_trainable]
  initial = collections.OrderedDict(weights=weights, optimizer=trainer.initialize(weights))

  def step(state, episode):
    x, y = user_data(episode)
    rate = schedules.rate(cfg.lr_schedule, trainer.learning_rate, episode, episodes)
    w, s = trainer.run(state['weights'], schedules.with_rate(state['optimizer'], rate), x, y, 1,
                       seed=episode)
    return collections.OrderedDict(weights=w, optimizer=s)

  state, curve, chosen = _episodes(name, display, cfg, initial, step,
                                   lambda s, users: evaluate(s['weights'], users), curve_test,
                                   selection, episodes, show_progress)
  return MethodResult(display, evaluate(state['weights'], test), curve,
                      model.num_parameters, model.num_parameters, chosen,
                      weights=[np.asarray(w) for w in state['weights']])


def sample_user(num_users: int, cfg, episode: int) -> int:
  """The training user of an episode (seeded by (seed, episode), as the image tasks)."""
  return int(client_data.sample_clients(num_users, 1, cfg.seed, episode)[0])


def sample_users(num_users: int, cfg, episode: int) -> List[int]:
  return [int(i) for i in client_data.sample_clients(num_users, cfg.clients_per_episode,
                                                     cfg.seed, episode)]
