"""FRL methods and baselines, by name (`METHODS`), under one communication budget.

Park et al., "Few-Round Learning for Federated Learning", Sec. 4 "Comparison schemes" and
Appendix C. Every method returns the model it deploys and the initial
weights; deployment (`deploy.py`) then runs the same R test rounds for all.

| name | preparing stage (budget T * (R + 1) rounds) | deployment |
|---|---|---|
| frl_distance_gpal | FRL meta-training, distance classifier, GPAL gamma | R rounds, nearest global prototype |
| frl_distance | the same with gamma = 0 | same |
| frl_linear | FRL meta-training, linear head (masked to tau classes) | R rounds of the head's CE |
| personalized | Appendix C: local support updates then a local meta-update per client, aggregated (R = 0 rounds in training) | R rounds, nearest prototype |
| fedavg | none: random initial model | R rounds of FedAvg, linear head |
| finetune_fedavg | FedAvg pre-training of an M-way classifier (M meta-train classes); its last layer is then replaced | R rounds of FedAvg |
| finetune_oneshot | the same pre-trained model (trained once per run, shared with finetune_fedavg) | R rounds of one-shot FL's CV client selection: K of 2K clients (`oneshot.py`) |
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from tff_meta.fewround import deploy, oneshot
from tff_meta.fewround import model as model_lib
from tff_meta.fewround import process as process_lib
from tff_meta.fewround import selection, tasks, training
from tff_meta.fewround.config import FewRoundConfig
from tff_meta.fewround.model import DISTANCE_CLASSIFIERS, FewRoundModel, build_few_round_model
from tff_meta.core.registry import Registry
from tff_meta.core.run_folder import PRETRAIN_DIR

METHODS: Registry = Registry('few-round method')

# Seeds: (seed, stream, index), so every method sees the same episodes.
TRAIN_STREAM, PRETRAIN_STREAM, TEST_STREAM = 0, 1, 2


@dataclasses.dataclass
class Context:
  cfg: FewRoundConfig
  data: tasks.ClassSplitData
  progress: bool = False
  cache: Dict[str, Any] = dataclasses.field(default_factory=dict)   # work shared by methods
  out: Optional[str] = None    # the run folder: checkpoints and metrics in <out>/<stage>/
  rounds: Dict[Any, Any] = dataclasses.field(default_factory=dict, repr=False)   # traced rounds

  def run_dir(self, stage: str) -> Optional[str]:
    """Where a preparing stage keeps its checkpoints, metrics.csv and tensorboard."""
    return os.path.join(self.out, stage) if self.out else None

  @property
  def spec(self):
    return process_lib.data_spec(self.data.element_shape)

  def model(self, classifier: str, ways: int = 0) -> FewRoundModel:
    return build_few_round_model(self.cfg.backbone, self.data.element_shape, classifier,
                                 ways or self.cfg.ways, seed=self.cfg.seed,
                                 **self.cfg.model_options)

  def round_computations(self, model: FewRoundModel, hp: process_lib.FewRoundHparams):
    """`process.build_round(model, hp, spec)`, traced once in this context per model structure
    and hparams.

    The computations read a model's structure only (its backbone object, classifier, class
    slots and weight shapes; the weights are their arguments), so a meta-trained method's
    training, checkpoint selection and test share one trace, as do the fine-tuning baselines'
    head-replaced models. The same computation objects also let the worker reuse what it
    compiled for them.
    """
    key = (id(model.backbone), model.classifier_name, model.ways,
           tuple(w.shape for w in model.initial_weights), repr(hp))
    if key not in self.rounds:   # the backbone is kept with the entry, so its id stays its own
      self.rounds[key] = (model.backbone, process_lib.build_round(model, hp, self.spec))
    return self.rounds[key][1]

  def episode(self, part: str, stream: int, i: int) -> list:
    cfg = self.cfg
    return tasks.episode(self.data, part, cfg.n_way_arg, cfg.examples_per_class,
                         cfg.num_clients, cfg.iid, (cfg.seed, stream, i))

  @property
  def budget_rounds(self) -> int:
    return self.cfg.episodes * (self.cfg.rounds + 1)

  def validation_accuracy(self, computations, weights) -> float:
    """Mean accuracy at R = rounds over `select_episodes` validation-class episodes, with the
    round computations of `process.build_round` (`round_computations`)."""
    cfg = self.cfg
    summaries = deploy.test_episodes(
        computations, weights,
        lambda i: self.episode('validation', selection.VALIDATION_STREAM, i),
        cfg.select_episodes, [cfg.rounds])
    return summaries[cfg.rounds].mean

  def selected(self, stage: str, initial: Callable[[], Any], unit: str, every: int, last: int,
               score):
    """(state, info) of the stage's checkpoint chosen on validation classes, or (None, {})
    when the config keeps the last one (`select_every = 0`). `initial()` gives the
    checkpoints' structure; it is called only when there is a selection to make."""
    if not self.cfg.select_every:
      return None, {}
    if self.out is None:
      raise ValueError('select_every > 0 needs a run folder (the stage\'s checkpoints).')
    return selection.select(self.run_dir(stage), initial(), stage, unit, every, last,
                            self.cfg.select_episodes, score)


@dataclasses.dataclass
class Prepared:
  """A method's deployed model, its test-time hparams and initial weights.

  `episode_fn` runs one test episode (`deploy.deploy_episode`'s signature);
  None means the plain R rounds of FL on the episode's K clients.
  """
  model: FewRoundModel
  hparams: process_lib.FewRoundHparams
  weights: List[np.ndarray]
  info: Dict[str, Any] = dataclasses.field(default_factory=dict)
  episode_fn: Optional[Callable] = None


def _meta_trained(ctx: Context, model: FewRoundModel, train_hp, deploy_hp, name) -> Prepared:
  """Meta-trains `model` (checkpointed in <out>/<name>/, resumed from there)."""
  process = process_lib.build_meta_training(model, train_hp, ctx.spec,
                                            ctx.round_computations(model, train_hp))
  phi, history = training.meta_train(
      process, lambda e: ctx.episode('train', TRAIN_STREAM, e), ctx.cfg.episodes,
      ctx.progress, desc=name, run_dir=ctx.run_dir(name),
      checkpoint_every=ctx.cfg.checkpoint_every)
  tail = history[-max(1, len(history) // 10):]
  info = {'train_query_accuracy_last10pct': float(np.mean(tail)),
          'communication_rounds': ctx.budget_rounds}
  as_numpy = lambda state: [np.asarray(w) for w in state['phi']]

  def score(state):   # with the deployment's round
    return ctx.validation_accuracy(ctx.round_computations(model, deploy_hp), as_numpy(state))

  state, chosen = ctx.selected(name, process.initialize, 'episode', ctx.cfg.select_every,
                               ctx.cfg.episodes, score)
  if state is not None:
    phi = as_numpy(state)
    info.update(chosen)
  return Prepared(model, deploy_hp, phi, info)


def _distance_head(cfg) -> Tuple[str, float]:
  """The distance classifier the config's `temperature` names, and the meta-rate scale of
  its head (the learned temperature's t; the paper's classifier has no head weight)."""
  return DISTANCE_CLASSIFIERS[cfg.temperature], cfg.temperature_lr_scale


def _linear_head(cfg) -> Tuple[str, float]:
  del cfg
  return 'linear', 1.0


def _frl(name: str, head: Callable[[Any], Tuple[str, float]], use_gpal: bool):
  """An FRL method; `head(cfg)` -> (classifier, its head_meta_lr_scale)."""
  def prepare(ctx: Context) -> Prepared:
    cfg = ctx.cfg
    classifier, head_scale = head(cfg)
    hp = cfg.hparams(gamma=cfg.gamma if use_gpal else 0.0, head_meta_lr_scale=head_scale)
    prepared = _meta_trained(ctx, ctx.model(classifier), hp, hp, name)
    if prepared.model.classifier.learns_temperature:   # the learned tau, as read back
      prepared.info['temperature'] = model_lib.temperature(prepared.model, prepared.weights)
    return prepared
  return prepare


# The meta-trained FRL methods: name -> (head(cfg) -> (classifier, head_meta_lr_scale), GPAL).
FRL_METHODS = {'frl_distance_gpal': (_distance_head, True),
               'frl_distance': (_distance_head, False),
               'frl_linear': (_linear_head, False)}
for _name, (_head, _gpal) in FRL_METHODS.items():
  METHODS.add(_name, _frl(_name, _head, _gpal))


def personalization_hparams(cfg) -> process_lib.FewRoundHparams:
  """Meta-training hparams of Appendix C's personalization scheme: no FL rounds (R = 0), each
  client adapts on its own support set and meta-updates at once, no GPAL. Its query loss scores
  the client's own prototypes (`meta_update.query_gradient`), never the global ones, so
  `train_prototypes` is 'previous' whatever the config says: 'recomputed' would only add an
  upload of prototypes that nothing reads."""
  return cfg.hparams(gamma=0.0, rounds=0, local_adaptation=True, train_prototypes='previous')


@METHODS.register('personalized')
def personalized(ctx: Context) -> Prepared:
  """Appendix C: clients meta-update right after their own support updates."""
  train_hp = personalization_hparams(ctx.cfg)
  prepared = _meta_trained(ctx, ctx.model('distance'), train_hp, ctx.cfg.hparams(gamma=0.0),
                           'personalized')
  prepared.info['communication_rounds'] = ctx.cfg.episodes   # one round per episode
  return prepared


# Not the registry's `fedavg` (algorithms/fedavg.py): every method is deployed through the same
# R rounds (`process.build_round`, Alg. 1 lines 5-21), so this baseline is that round from a
# random model. Measured (tests/fewround/test_fedavg_baseline.py, one round): as the registry
# builds it (Adam at 1e-4, batches of 10, all data) its round differs from this one by 0.996 of
# this round's update; given the support sets, SGD at alpha, E epochs and full batches it is
# this round to 7.7e-7 when the task has as many classes as head slots (N-way); in random-way
# tasks the head's class mask, which the registry's FedAvg has no setting for, still leaves
# them 0.50 of an update apart (3 of 5 classes).
@METHODS.register('fedavg')
def fedavg(ctx: Context) -> Prepared:
  """FedAvg from a random initial model (no preparing stage)."""
  model = ctx.model('linear')
  return Prepared(model, ctx.cfg.hparams(gamma=0.0), list(model.initial_weights),
                  {'communication_rounds': 0})


def _pretrained(ctx: Context):
  """FedAvg pre-training of an M-way linear classifier on the meta-train classes.

  Run once per `Context` and shared by the fine-tuning baselines. With
  `select_every` the kept round is chosen on validation classes by the
  fine-tuning via FedAvg it leads to (`selection.py`), every select_every
  episodes' worth of rounds, select_every * (R + 1).
  Returns (the M-way model, its trained weights, selection info).
  """
  if 'pretrained' not in ctx.cache:
    cfg = ctx.cfg
    pre_model = ctx.model('linear', ways=len(ctx.data.part('train')))
    sample = lambda r: tasks.pretrain_clients(ctx.data, cfg.n_way_arg, cfg.examples_per_class,
                                              cfg.num_clients, cfg.iid,
                                              (cfg.seed, PRETRAIN_STREAM, r))
    weights = training.federated_pretrain(
        ctx.round_computations(pre_model, cfg.hparams(gamma=0.0, zero_head=False)),
        pre_model.initial_weights, sample, ctx.budget_rounds, ctx.progress,
        run_dir=ctx.run_dir(PRETRAIN_DIR), checkpoint_every=cfg.checkpoint_every)

    def score(theta):   # fine-tuning's round: one model structure for every candidate
      model, hp = _head_replaced(ctx, pre_model, [np.asarray(w) for w in theta])
      return ctx.validation_accuracy(ctx.round_computations(model, hp),
                                     list(model.initial_weights))

    chosen, info = ctx.selected(PRETRAIN_DIR, lambda: list(pre_model.initial_weights), 'round',
                                cfg.select_every * (cfg.rounds + 1), ctx.budget_rounds, score)
    if chosen is not None:
      weights = [np.asarray(w) for w in chosen]
    ctx.cache['pretrained'] = (pre_model, weights, info)
  return ctx.cache['pretrained']


def _head_replaced(ctx: Context, pre_model: FewRoundModel, weights):
  """(the pre-trained backbone with a fresh N-way linear head, the deployment hparams)."""
  model = pre_model.with_classifier('linear', ctx.cfg.ways, weights[:pre_model.num_backbone],
                                    seed=ctx.cfg.seed + 1)
  return model, ctx.cfg.hparams(gamma=0.0)


def _finetuned(ctx: Context, episode_fn=None) -> Prepared:
  """The pre-trained backbone with its M-way layer replaced by a fresh N-way one."""
  pre_model, weights, chosen = _pretrained(ctx)
  model, hp = _head_replaced(ctx, pre_model, weights)
  return Prepared(model, hp, list(model.initial_weights),
                  {'communication_rounds': ctx.budget_rounds, 'pretrain_classes': pre_model.ways,
                   **chosen},
                  episode_fn(model, hp) if episode_fn else None)


@METHODS.register('finetune_fedavg')
def finetune_fedavg(ctx: Context) -> Prepared:
  """Pre-train an M-way classifier with FedAvg, replace its last layer, fine-tune."""
  return _finetuned(ctx)


@METHODS.register('finetune_oneshot')
def finetune_oneshot(ctx: Context) -> Prepared:
  """The same pre-trained model, fine-tuned by one-shot FL's CV selection (K of 2K)."""
  return _finetuned(ctx, lambda model, hp: oneshot.CVSelection(model, hp, ctx.spec,
                                                               keep=ctx.cfg.num_clients))
