"""The two trained method families shared by both tasks, as episode loops.

- `meta_learning`: FedMeta MAML / Meta-SGD (FedMeta Alg. 1; Chen et al. 2018b
  Alg. 1) through the same `fedmeta.build_fedmeta_process` TFF process as the
  image tasks, with the task's loss; one TFF round per episode, test users
  adapted and predicted by `evaluation.build_predict`.
- `pretraining`: one unified model pre-trained on training users, one plain-TF
  optimizer step on one sampled user per episode (NN(pre-trained), NN-unified).
Both checkpoint and record a curve (`loop.run_episodes`).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Callable, Dict, List, Sequence

import numpy as np

from tff_meta.algorithms import base, fedmeta
from tff_meta.program import client_data
from tff_meta.recommendation import evaluation, loop
from tff_meta.recommendation.training import Trainer


@dataclasses.dataclass
class MethodResult:
  """Final metrics of one method (or one row of it), its curve and its sizes (Table 5)."""
  method: str
  metrics: Dict[str, float]
  curve: List[Dict[str, float]] = dataclasses.field(default_factory=list)
  algorithm_params: int = 0
  model_params: int = 0

  def row(self) -> 'collections.OrderedDict':
    return collections.OrderedDict(method=self.method, **self.metrics,
                                   algorithm_params=self.algorithm_params,
                                   model_params=self.model_params)


def meta_learning(cfg, *, name: str, display: str, variant: str, model, loss,
                  train_batch: Callable[[int], list], test: Sequence, curve_test: Sequence,
                  score: Callable, show_progress: bool) -> MethodResult:
  """Meta-trains with the FedMeta process; `train_batch(episode)` gives its client values."""
  process = fedmeta.build_fedmeta_process(
      model, variant=variant, inner_lr=cfg.inner_lr, inner_steps=cfg.inner_steps,
      server_optimizer=base.build_optimizer(cfg.server_optimizer, cfg.server_lr), loss=loss)
  predict = evaluation.build_predict(model, process.params_type, loss=loss,
                                     inner_lr=cfg.inner_lr, steps=cfg.adapt_steps)

  def evaluate(state, episodes):
    return score(predict(state['params'], evaluation.prediction_inputs(episodes)), episodes)

  def step(state, episode):
    return process.next(state, train_batch(episode))[0]

  state, curve = loop.run_episodes(
      name=display, initial_state=process.initialize(), step=step,
      evaluate=lambda s: evaluate(s, curve_test), episodes=cfg.episodes,
      eval_every=cfg.eval_every, checkpoint_every=cfg.checkpoint_every,
      output_dir=os.path.join(cfg.resolved_output_dir(), name), show_progress=show_progress)
  algorithm_params = int(sum(np.size(v) for vs in state['params'].values() for v in vs))
  return MethodResult(display, evaluate(state, test), curve, algorithm_params,
                      model.num_parameters)


def pretraining(cfg, *, name: str, display: str, model, trainer: Trainer, episodes: int,
                user_data: Callable[[int], tuple], evaluate: Callable, show_progress: bool
                ) -> MethodResult:
  """Pre-trains `model`: episode e takes one optimizer step on `user_data(e) = (x, y)`.

  `evaluate(weights, curve: bool)` scores the weights (the curve may use fewer users).
  """
  weights = [np.asarray(w) for w in model.initial_trainable]
  initial = collections.OrderedDict(weights=weights, optimizer=trainer.initialize(weights))

  def step(state, episode):
    x, y = user_data(episode)
    w, s = trainer.run(state['weights'], state['optimizer'], x, y, 1, seed=episode)
    return collections.OrderedDict(weights=w, optimizer=s)

  state, curve = loop.run_episodes(
      name=display, initial_state=initial, step=step,
      evaluate=lambda s: evaluate(s['weights'], True), episodes=episodes,
      eval_every=cfg.eval_every, checkpoint_every=cfg.checkpoint_every,
      output_dir=os.path.join(cfg.resolved_output_dir(), name), show_progress=show_progress)
  return MethodResult(display, evaluate(state['weights'], False), curve,
                      model.num_parameters, model.num_parameters)


def sample_user(num_users: int, cfg, episode: int) -> int:
  """The training user of an episode (seeded by (seed, episode), as the image tasks)."""
  return int(client_data.sample_clients(num_users, 1, cfg.seed, episode)[0])


def sample_users(num_users: int, cfg, episode: int) -> List[int]:
  return [int(i) for i in client_data.sample_clients(num_users, cfg.clients_per_episode,
                                                     cfg.seed, episode)]
