"""Recommendation run configuration: a TOML file whose keys all have override flags.

One config is one setting of the papers' tables: a task (`movielens`: Chen et
al. 2018b Table 3; `service`: Table 6 / FedMeta Table 3), a support fraction
and the methods to compare. `configs/recommend/` has one per cell.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Any, Dict, List, Optional, Tuple

from tff_meta.core import config_file
from tff_meta.algorithms import hparams
from tff_meta.algorithms.hparams import OPTIMIZER
from tff_meta.core.config_file import ConfigError
from tff_meta.core.fields import (above, at_least, check_fields, declared, field, fraction,
                                  one_of, registered)
from tff_meta.core.run_keys import RunKeys
from tff_meta.data.movielens import SPLITS
from tff_meta.recommendation.schedules import SCHEDULES

# MovieLens rating models (tff_meta/models/keras_models.py).
RATING_MODELS = ('rating_mlp', 'rating_wide_mlp', 'rating_factor_mlp')
# Their starts (warm_start.RATING_INITS).
RATING_INITS = ('keras', 'bias', 'factors')
# select_on: the kept parameters (movielens_task.SELECTIONS) and evaluate_on: the scored users.
SELECT_ON = ('last', 'validation_rmse')
# train_split: the training users' support/query split, drawn once or at every visit.
TRAIN_SPLITS = ('fixed', 'per_episode')
EVALUATE_ON = ('test', 'validation')
# Keys that only the meta-learned methods read (`methods.meta_learning`: the rows named MAML...
# or Meta-SGD..., `META_METHOD_PREFIXES`). No other method's row depends on them, so
# `analysis.recommend_report` pairs those rows across runs that differ only in these keys.
# (train_support_fraction is not one: it orders the training ratings that SVD++ visits.)
META_ONLY_KEYS = frozenset({'train_split', 'server_optimizer', 'server_lr',
                            'clients_per_episode'})
META_METHOD_PREFIXES = ('MAML', 'Meta-SGD')


@dataclasses.dataclass
class RecommendConfig:
  """One recommendation run; each field's help is its flag's, its check its range."""

  name: str = declared(RunKeys, 'name', 'recommend')
  task: str = field('movielens', 'movielens (rating prediction, Table 3) or service '
                    '(event-log recommendation, Table 6).')
  data_path: str = field(
      '', 'movielens: the unzipped ml-100k folder (u.data, u.user, u.item; not shipped). '
      'service: a CSV/Parquet event log, or an ml-100k folder (events = genres); empty = a '
      'generated synthetic log.')
  output_dir: str = declared(RunKeys, 'output_dir')
  methods: str = field('', 'Comma-separated methods; empty = all of the task (see docs).')
  seed: int = declared(RunKeys, 'seed')
  support_fraction: float = field(
      0.8, 'Test users: fraction p of their data in the support set ("p Support").', fraction())
  train_support_fraction: float = field(
      0.5, 'Training tasks: fraction of the data used as support (Fig. 3).', fraction())
  train_split: str = field(
      'fixed', 'movielens: training users\' support/query split for MAML and Meta-SGD: fixed '
      '(drawn once, as a test user\'s) or per_episode (drawn anew by support_sampling each time '
      'the user is sampled; a chronological split is the same at every visit). NN(pre-trained) '
      'steps on all of a user\'s ratings and is unaffected.', one_of(TRAIN_SPLITS))
  train_user_fraction: float = field(0.8, 'Fraction of users that train (the rest test).',
                                     fraction())
  validation_fraction: float = field(
      0.0, 'movielens: this fraction of the training users (a seeded draw) is held out as '
      'VALIDATION users: not trained on, split as test users are; they choose the kept episode '
      '(select_on) and, with evaluate_on = "validation", are scored in place of the test users '
      '(rate sweeps). 0 = none.', fraction(zero_ok=True))
  select_on: str = field(
      'last', 'movielens: which parameters of each trained method (MAML, Meta-SGD, '
      'NN(pre-trained)) are scored: last (after all episodes) or validation_rmse (model '
      'selection, "early stopping": the curve scores the validation users every eval_every '
      'episodes and the parameters with the lowest validation RMSE are kept; needs '
      'validation_fraction > 0; the chosen episode is in the table and results.json).',
      one_of(SELECT_ON))
  evaluate_on: str = field(
      'test', 'movielens: the users of the final table: test, or validation (rate sweeps: the '
      'held-out validation users, test users unused; needs validation_fraction > 0).',
      one_of(EVALUATE_ON))
  query_fraction: float = field(
      0.2, 'service: the last fraction of each test user\'s events is the query set.', fraction())
  support_sampling: str = field(
      'random', 'movielens: how each user\'s ratings split into support and query sets: '
      'random (default: same sizes, drawn at random, seeded; Table 3\'s protocol, the '
      'paper\'s MovieLens text says only "a fraction of data") or chronological (query = the '
      'latest ratings, as in the paper\'s production task; no peeking at the future). service '
      'is always chronological.', registered(lambda: SPLITS))
  min_events: int = field(2, 'service: users with fewer events are dropped (and counted).',
                          at_least(1))
  sort_log: bool = field(False, 'service: sort each user\'s events by time instead of '
                         'rejecting an unsorted log.')
  episodes: int = field(
      5000, 'Meta-training episodes (and NN(pre-trained) pre-training episodes).', at_least(1))
  clients_per_episode: int = field(
      1, 'MAML / Meta-SGD: users per meta-training episode, the meta-batch: the server averages '
      'their meta-gradients into one meta-update (the papers: 1). NN(pre-trained) and '
      'NN-unified take one user per step.', at_least(1))
  eval_every: int = declared(RunKeys, 'eval_every', 500)   # the curve; users: select_on's help
  checkpoint_every: int = declared(RunKeys, 'checkpoint_every', 500)
  eval_users: int = field(0, 'Evaluate the curve on the first N of its users (0 = all; the '
                          'final table always uses all).')
  hidden_units: int = field(32, 'Hidden units of the NN models (MovieLens 32, service 64).',
                            at_least(1))
  model: str = field(
      'rating_mlp', 'movielens: the rating model of MAML, Meta-SGD, NN(self) and '
      'NN(pre-trained): rating_mlp (the paper\'s), rating_wide_mlp (plus a linear path that '
      'holds item and user biases) or rating_factor_mlp (rating_wide_mlp plus 8 movie factors '
      'times a user vector that the inner loop adapts; tff_meta/models/keras_models.py).',
      one_of(RATING_MODELS))
  rating_init: str = field(
      'keras', 'movielens: initial weights of the rating model of MAML, Meta-SGD and '
      'NN(pre-trained): keras (Keras\' initialisers), bias (start at the bias baseline\'s mu '
      'and item biases from the training users) or factors (bias, and rating_factor_mlp\'s '
      'movie factors E from the training users by ALS); tff_meta/recommendation/warm_start.py. '
      'NN(self) always starts at keras.', one_of(RATING_INITS))
  factors: int = field(8, 'rating_factor_mlp: movie factors (the length of u).', at_least(1))
  factor_stddev: float = field(
      0.1, 'rating_factor_mlp: stddev of the movie factors E\'s random start (rating_init = '
      'factors sets E from the training users instead).', at_least(0))
  factor_scale: float = field(
      1.0, 'rating_factor_mlp: s in s <E x_movie, u>; the inner loop fits u s^2 times as fast '
      'as at s = 1, the model\'s functions unchanged (tff_meta/models/keras_models.py).', above(0))
  factor_lr_scale: float = field(
      1.0, 'rating_factor_mlp: the outer rate of its factor layer (movie factors E and the start '
      'of u) as a multiple of server_lr (MAML, Meta-SGD) and pretrain_lr (NN(pre-trained)); an '
      'episode moves only its user\'s movies\' rows of E (tff_meta/learning/step_scale.py).',
      above(0))
  inner_steps: int = declared(hparams.InnerLoop, 'inner_steps', 10)   # MovieLens 10, service 100
  eval_inner_steps: int = declared(hparams.EvalSteps, 'eval_inner_steps')
  inner_lr: float = declared(hparams.InnerRate, 'inner_lr', 0.01)   # also NN(pre-trained)'s
  server_optimizer: str = declared(hparams.MetaServer, 'server_optimizer')   # MAML / Meta-SGD
  server_lr: float = declared(hparams.MetaServer, 'server_lr', 0.001)
  pretrain_optimizer: str = field(
      'adam', 'Optimizer of NN(pre-trained) / NN-unified pre-training.', OPTIMIZER)
  pretrain_lr: float = field(0.001, 'Learning rate of that pre-training.', above(0))
  lr_schedule: str = field(
      'constant', 'Schedule of server_lr and pretrain_lr alike over the episodes: constant (the '
      'papers) or cosine (rate x (1 + cos(pi (e - 1) / episodes)) / 2 at episode e; '
      'tff_meta/recommendation/schedules.py).', one_of(SCHEDULES))
  finetune_steps: int = field(
      -1, 'NN-unified fine-tuning steps on the support set; -1 = eval_inner_steps.')
  self_optimizer: str = field(
      'adam', 'Optimizer of the models trained on the support set alone (SELF).', OPTIMIZER)
  self_lr: float = field(0.01, 'Learning rate of those models.', above(0))
  self_steps: str = field(
      '100', 'Training steps of the SELF models, comma-separated (service: "100,10000").')
  batch_size: int = field(
      500, 'Minibatch of pre-training / SELF steps: min(batch_size, half the user\'s data); '
      '<= 0 = all.')
  max_classes: int = field(40, 'service: C, the size of each user\'s local label space (40).',
                           at_least(1))
  max_events: int = field(
      500, 'service: events per meta-training task (500, or half the user\'s events).', at_least(1))
  pretrain_steps: int = field(
      5000, 'service: NN-unified pre-training steps (one user each).')
  bias_item_shrinkage: float = field(
      25.0, 'movielens bias baseline: lambda of the item biases (Koren: 25).', at_least(0))
  bias_user_shrinkage: float = field(
      10.0, 'movielens bias baseline: lambda of a test user\'s bias (Koren: 10).', at_least(0))
  synthetic_users: int = field(100, 'service without data_path: users in the generated log.')
  synthetic_services: int = field(
      300, 'service without data_path: services in the generated catalogue.')

  def resolved_output_dir(self) -> str:
    return self.output_dir or os.path.join('runs', self.name)

  @property
  def method_list(self) -> List[str]:
    return [m.strip() for m in self.methods.split(',') if m.strip()]

  @property
  def self_step_list(self) -> Tuple[int, ...]:
    try:
      steps = tuple(int(s) for s in self.self_steps.split(',') if s.strip())
    except ValueError:
      steps = ()
    if not steps or min(steps) < 1:
      raise ConfigError(f'self_steps must be comma-separated integers >= 1, e.g. "100,10000"; '
                        f'got {self.self_steps!r}.')
    return steps

  @property
  def adapt_steps(self) -> int:
    return self.eval_inner_steps if self.eval_inner_steps >= 0 else self.inner_steps

  @property
  def finetune(self) -> int:
    return self.finetune_steps if self.finetune_steps >= 0 else self.adapt_steps

  def validate(self) -> 'RecommendConfig':
    """Checks values; `experiment.validate` also checks the task and method names."""
    check_fields(self, ConfigError)   # each key's declared range
    if self.factor_lr_scale != 1.0 and self.model != 'rating_factor_mlp':
      raise ConfigError(f'factor_lr_scale scales the factor layer of model = '
                        f'"rating_factor_mlp"; got model = "{self.model}" (leave it at 1).')
    if self.rating_init == 'factors' and self.model != 'rating_factor_mlp':
      raise ConfigError(f'rating_init = "factors" sets the movie factors of model = '
                        f'"rating_factor_mlp"; got model = "{self.model}" (use rating_init = '
                        f'"bias" for it).')
    needs = [f'{k} = "{getattr(self, k)}"' for k, plain in (('select_on', 'last'),
                                                            ('evaluate_on', 'test'))
             if getattr(self, k) != plain]
    if needs and not self.validation_fraction > 0:
      raise ConfigError(f'{" and ".join(needs)} needs validation users: set validation_fraction '
                        '> 0 (e.g. 0.2).')
    if needs and self.task != 'movielens':
      raise ConfigError(f'{" and ".join(needs)} is for task = "movielens" only.')
    self.self_step_list  # pylint: disable=pointless-statement
    return self


# Resuming into a run folder (`resume.check_resume`): keys that change how a run executes,
# not what it computes, may differ from the saved config.toml; every other key, a new one
# included, must be equal (episodes too: lr_schedule = "cosine" spans them).
EXECUTION_ONLY = frozenset({'name', 'output_dir', 'checkpoint_every'})
# `methods` picks the rows of the table; each method's sub-folder is computed from the other
# keys, so a rerun with fewer or more methods reuses or adds sub-folders, and results.json is
# rewritten for the methods it names.
TABLE_ONLY = frozenset({'methods'})


def resume_rules() -> Dict[str, Any]:
  """`resume.check_resume`'s rules for a programs.train run folder."""
  return dict(may_differ=EXECUTION_ONLY | TABLE_ONLY,
              defaults=tomllib.loads(config_file.to_toml(RecommendConfig())))


FIELDS = {f.name: f for f in dataclasses.fields(RecommendConfig)}


def from_dict(raw: Dict[str, Any], source: str = '<dict>') -> RecommendConfig:
  return config_file.coerce_dataclass(RecommendConfig, raw, source=source)


def load(path: str, overrides: Optional[Dict[str, Any]] = None) -> RecommendConfig:
  return config_file.load(RecommendConfig, path, overrides, see='configs/recommend/')


def define_flags(flags_module) -> None:
  flags_module.DEFINE_list('config', [], 'TOML config(s) in configs/recommend/; several are run '
                           'in turn and printed as one table.')
  config_file.define_flags(flags_module, FIELDS.values())


def overrides_from_flags(flag_values) -> Dict[str, Any]:
  return config_file.overrides_from_flags(flag_values, FIELDS)
