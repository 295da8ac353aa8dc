"""MovieLens-100k rating prediction (Chen et al. 2018b Sec. 3.1, Table 3, Figs. 2-3).

Methods (`METHODS`): `maml`, `metasgd` (FedMeta process, squared error,
the rating model `cfg.model`: the paper's `rating_mlp`, `rating_wide_mlp`,
which holds the bias baseline as a special case, or `rating_factor_mlp` (plus movie
factors times a user vector the inner loop adapts); all NN methods share it; MAML,
Meta-SGD and NN(pre-trained) start it at `cfg.rating_init`, e.g. at the bias
baseline's mu and item biases, `warm_start`),
`nn_self`, `nn_pretrained`, `svdpp_self`, `svdpp_global`
and `bias` (`baselines`; not in the paper: the floor every learned method
must beat); `maml_pretrained` (not in the paper, not in the configs' list):
MAML meta-trained from NN(pre-trained)'s kept weights. Metrics: RMSE over all query ratings and Precision@{1,3,10}
averaged over test users, relevant = rating 5 as in the paper (`metrics`);
extras, printed in a second, labelled table: Precision@k with relevant =
rating >= 4 and NDCG@k.

Training users' episodes (`_training_batch`): each user's one support/query split, or with
`train_split = "per_episode"` a new split at each visit (`tasks.episode`).

Model selection (`SELECTIONS[cfg.select_on]`): with validation users held out
(`validation_fraction`), `validation_rmse` keeps each trained method's
parameters of the evaluation with the lowest RMSE on the validation users
("early stopping"), and the table scores those on the test users, with the
kept episode. `evaluate_on = "validation"` scores the validation users in
place of the test users (rate sweeps; test users unused).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Dict, List, Tuple

import numpy as np

from tff_meta.core.tables import markdown_table
from tff_meta.data.movielens import RatingsDataset, load_movielens
from tff_meta.data.types import DataError
from tff_meta.learning import losses
from tff_meta.models import build_model_spec, keras_models
from tff_meta.recommendation import (baselines, evaluation, features, methods, metrics, tasks,
                                     warm_start)
from tff_meta.recommendation.training import Trainer
from tff_meta.core.registry import Registry

K_VALUES = (1, 3, 10)
# The paper's metrics (Precision@k: relevant = rating 5), then labelled extras not in the paper.
METRICS = ('rmse',) + tuple(f'precision@{k}' for k in K_VALUES)
EXTRA_METRICS = tuple(f'precision_ge4@{k}' for k in K_VALUES) + tuple(f'ndcg@{k}' for k in K_VALUES)
EXTRA_HEADERS = tuple(f'P@{k} (rating >= 4)' for k in K_VALUES) + tuple(f'NDCG@{k}' for k in K_VALUES)
BIAS = 'Bias baseline'
# select_on -> (metric, 'min' | 'max') chosen on the validation users; 'last': no selection.
SELECTIONS = {'last': None, 'validation_rmse': ('rmse', 'min')}


@dataclasses.dataclass
class MovieLensData:
  tasks: tasks.RatingTasks
  items: tasks.RatingTasks          # the same episodes with item ids as x (for SVD++)
  dataset: RatingsDataset

  validation: bool = False

  def fingerprint(self) -> str:
    return self.dataset.fingerprint()

  @property
  def num_train_users(self) -> int:
    return len(self.tasks.train)

  def summary(self) -> str:
    text = f'{self.dataset.description}; {self.tasks.summary()}'
    return text.replace('testing users', 'VALIDATION users (held-out training users; test users '
                        'unused)') if self.validation else text


def prepare(cfg) -> MovieLensData:
  if not cfg.data_path:
    raise DataError('task = "movielens" needs data_path (flag --data_path): the unzipped ml-100k '
                    'folder from https://grouplens.org/datasets/movielens/100k/ (MovieLens terms '
                    'forbid redistribution, so it is not shipped).')
  ds = load_movielens(cfg.data_path)
  encoder = features.MovieLensEncoder.for_dataset(ds)
  split = dict(support_fraction=cfg.support_fraction,
               train_support_fraction=cfg.train_support_fraction,
               train_user_fraction=cfg.train_user_fraction, seed=cfg.seed,
               sampling=cfg.support_sampling, validation_fraction=cfg.validation_fraction)
  encoded = tasks.encode_users(ds.clients, encoder.encode)
  items = tasks.encode_users(ds.clients, lambda u: u.features['item'][:, None])
  on_validation = cfg.evaluate_on == 'validation'
  scored = lambda t: dataclasses.replace(t, test=t.validation) if on_validation else t
  return MovieLensData(scored(tasks.rating_tasks(encoded, **split)),
                       scored(tasks.rating_tasks(items, **split)), ds, validation=on_validation)


def score(predictions, episodes) -> Dict[str, float]:
  preds = [np.ravel(p) for p in predictions]
  ratings = [e.query_y for e in episodes]
  out = {'rmse': metrics.rmse(preds, ratings)}
  for k in K_VALUES:
    out[f'precision@{k}'] = metrics.precision_at_k(preds, ratings, k)
  for k in K_VALUES:
    out[f'precision_ge4@{k}'] = metrics.precision_at_k(preds, ratings, k, relevant=4.0)
  for k in K_VALUES:
    out[f'ndcg@{k}'] = metrics.ndcg_at_k(preds, ratings, k)
  return out


# Model options beyond hidden_units, by model name: `rating_factor_mlp` embeds the movie
# one-hot, the encoder's first block (`features.MovieLensEncoder`), max_item_id wide, and
# takes its factor keys from the config.
MODEL_OPTIONS = {'rating_factor_mlp': lambda cfg, data: {
    'movies': data.dataset.max_item_id, 'factors': cfg.factors,
    'factor_stddev': cfg.factor_stddev, 'factor_scale': cfg.factor_scale}}


def _model(cfg, data: MovieLensData, start: str = ''):
  """The rating model the NN methods share (cfg.model, initial weights drawn with cfg.seed),
  started by `warm_start.RATING_INITS[start or cfg.rating_init]` from the training users."""
  options = MODEL_OPTIONS.get(cfg.model, lambda *_: {})(cfg, data)
  spec = build_model_spec(cfg.model, (data.tasks.feature_dim,), 1, seed=cfg.seed,
                          hidden_units=cfg.hidden_units, **options)
  train = data.items.train
  return warm_start.initialized(spec, start or cfg.rating_init,
                                np.concatenate([e.all_x[:, 0] for e in train]),
                                np.concatenate([e.all_y for e in train]), cfg.bias_item_shrinkage,
                                np.concatenate([np.full(len(e.all_y), k)
                                                for k, e in enumerate(train)]))


def _step_scales(cfg, model) -> List[float]:
  """The outer step's multiple per weight: `factor_lr_scale` for the factor layer's weights
  (rating_factor_mlp's E and u), 1 for the others (`learning.step_scale`)."""
  return [cfg.factor_lr_scale if layer == keras_models.FACTOR_LAYER else 1.0
          for _, layer in model.weight_layers] or [1.0] * len(model.initial_trainable)


def _curve_users(cfg, episodes: List) -> List:
  return episodes[:cfg.eval_users] if cfg.eval_users > 0 else episodes


def _selection(cfg, data: MovieLensData):
  """`methods.Selection` on the validation users (never the test users), or None."""
  select = SELECTIONS[cfg.select_on]
  if select is None:
    return None
  return methods.Selection(_curve_users(cfg, data.tasks.validation), *select)


def _training_batch(cfg, train: List[tasks.Episode], episode: int) -> List:
  """The FedMeta client values of `episode`'s training users (`methods.sample_users`): their
  fixed splits, or with train_split = "per_episode" each user's ratings split anew by
  support_sampling, seeded by (seed, user, episode) (`tasks.episode`)."""
  chosen = [train[i] for i in methods.sample_users(len(train), cfg, episode)]
  if cfg.train_split == 'per_episode':
    f = cfg.train_support_fraction
    chosen = [tasks.episode(e.user, e.all_x, e.all_y, f, 1.0 - f, cfg.support_sampling,
                            cfg.seed, stream=(episode,)) for e in chosen]
  return [e.tensors() for e in chosen]


def _meta(cfg, data: MovieLensData, show_progress: bool, *, variant: str, display: str,
          name: str = '', start=None):
  """FedMeta `variant` on the training users; `start` (weights) replaces the model's start."""
  model = _model(cfg, data)
  if start is not None:
    model = dataclasses.replace(model, initial_trainable=[np.asarray(w, np.float32)
                                                          for w in start])
  return methods.meta_learning(
      cfg, name=name or variant, display=display, variant=variant, model=model,
      step_scales=_step_scales(cfg, model),
      loss=losses.SQUARED_ERROR,
      train_batch=functools.partial(_training_batch, cfg, data.tasks.train),
      test=data.tasks.test, curve_test=_curve_users(cfg, data.tasks.test), score=score,
      show_progress=show_progress, selection=_selection(cfg, data))


def nn_pretrained(cfg, data: MovieLensData, show_progress: bool):
  """Pre-trained on all training users' data (one user per episode), fine-tuned on support
  with the adaptation MAML uses (eval_inner_steps SGD steps at inner_lr)."""
  model = _model(cfg, data)
  trainer = Trainer(model, losses.SQUARED_ERROR, cfg.pretrain_optimizer, cfg.pretrain_lr, 0,
                    step_scales=_step_scales(cfg, model))
  train = data.tasks.train
  params = lambda w: {'weights': list(w)}
  predict = evaluation.build_predict(
      model, evaluation.params_type(params(model.initial_trainable)), loss=losses.SQUARED_ERROR,
      inner_lr=cfg.inner_lr, steps=cfg.adapt_steps)

  def user_data(episode):
    e = train[methods.sample_user(len(train), cfg, episode)]
    return e.all_x, e.all_y

  def evaluate(weights, eps):
    return score(predict(params(weights), evaluation.prediction_inputs(eps)), eps)

  return methods.pretraining(cfg, name='nn_pretrained', display='NN(pre-trained)', model=model,
                             trainer=trainer, episodes=cfg.episodes, user_data=user_data,
                             evaluate=evaluate, test=data.tasks.test,
                             curve_test=_curve_users(cfg, data.tasks.test),
                             show_progress=show_progress, selection=_selection(cfg, data))


MAML_PRETRAINED = 'MAML(pre-trained start)'
# The rows whose relative improvement over NN(pre-trained) the table prints (Table 3's last row).
IMPROVED = ('MAML', MAML_PRETRAINED)


def maml_pretrained(cfg, data: MovieLensData, show_progress: bool):
  """MAML meta-trained from NN(pre-trained)'s scored weights: pre-train, then meta-train
  (the two stages of Meta-Baseline, Chen, Liu et al., ICCV 2021; not in Chen et al. 2018b,
  whose MAML starts where NN(pre-trained) does). Stage 1 is `nn_pretrained` itself, in its
  own sub-folder, so a run that lists both methods pre-trains once (the second call resumes
  from its final checkpoint); stage 2 is `cfg.episodes` FedMeta episodes (Alg. 1) with MAML's
  rates. Under model selection each stage keeps its lowest validation RMSE, and episode 0 of
  stage 2 is NN(pre-trained)'s kept network adapted as MAML adapts it, so on the validation
  users the kept network is never worse than NN(pre-trained)'s."""
  pretrained = nn_pretrained(cfg, data, show_progress)
  return _meta(cfg, data, show_progress, variant='maml', display=MAML_PRETRAINED,
               name='maml_pretrained', start=pretrained.weights)


def nn_self(cfg, data: MovieLensData, show_progress: bool):
  """The rating model trained on each test user's support set alone (self_steps steps)."""
  del show_progress
  model = _model(cfg, data, start='keras')   # SELF: no other user's data
  trainer = Trainer(model, losses.SQUARED_ERROR, cfg.self_optimizer, cfg.self_lr, cfg.batch_size)
  steps = cfg.self_step_list[-1]
  preds = [trainer.predict(trainer.fit(model.initial_trainable, e.support_x, e.support_y, steps,
                                       seed=cfg.seed), e.query_x) for e in data.tasks.test]
  return methods.MethodResult('NN(self)', score(preds, data.tasks.test), [],
                              model.num_parameters, model.num_parameters)


def _svd_users(data: MovieLensData, episodes=None) -> Dict[str, Dict[str, np.ndarray]]:
  """{user: support items and ratings, query items} of `episodes` (default: the test users)."""
  return {e.user: {'support_item': e.support_x[:, 0], 'support_rating': e.support_y,
                   'query_item': e.query_x[:, 0]}
          for e in (data.items.test if episodes is None else episodes)}


def bias(cfg, data: MovieLensData, show_progress: bool):
  """Bias baseline: mu and item biases from all training users' ratings, each test user's bias
  from its support set (`baselines.bias_predictions`). Under model selection it also scores the
  validation users the curves score (`curve_reference`: Fig. 2's horizontal line)."""
  del show_progress
  train = data.items.train
  mu, b_item = baselines.item_biases(np.concatenate([e.all_x[:, 0] for e in train]),
                                     np.concatenate([e.all_y for e in train]),
                                     cfg.bias_item_shrinkage)
  predict = lambda episodes=None: baselines.bias_predictions(
      mu, b_item, _svd_users(data, episodes), cfg.bias_user_shrinkage)
  reference = None
  selection = _selection(cfg, data)
  if selection is not None and selection.users:
    users = _curve_users(cfg, data.items.validation)
    reference = score(predict(users), selection.users)
  return methods.MethodResult(BIAS, score(predict(), data.tasks.test), curve_reference=reference)


def svdpp_self(cfg, data: MovieLensData, show_progress: bool):
  del show_progress
  preds = baselines.svdpp_self(_svd_users(data), seed=cfg.seed)
  return methods.MethodResult('SVD++(self)', score(preds, data.tasks.test))


def svdpp_global(cfg, data: MovieLensData, show_progress: bool):
  del show_progress
  train = [(e.user, int(i), float(r)) for e in data.items.train
           for i, r in zip(e.all_x[:, 0], e.all_y)]
  preds = baselines.svdpp_global(train, _svd_users(data), seed=cfg.seed)
  return methods.MethodResult('SVD++(global)', score(preds, data.tasks.test))


METHODS: Registry = Registry('movielens method')
METHODS.add('bias', bias)
METHODS.add('svdpp_self', svdpp_self)
METHODS.add('svdpp_global', svdpp_global)
METHODS.add('nn_self', nn_self)
METHODS.add('nn_pretrained', nn_pretrained)
METHODS.add('maml', functools.partial(_meta, variant='maml', display='MAML'))
METHODS.add('metasgd', functools.partial(_meta, variant='metasgd', display='Meta-SGD'))
METHODS.add('maml_pretrained', maml_pretrained)
DEFAULT_METHODS = ('bias', 'svdpp_self', 'svdpp_global', 'nn_self', 'nn_pretrained', 'maml', 'metasgd')


def _floor_notes(blocks: List[Tuple[str, List[dict]]]) -> List[str]:
  """Per block with the bias baseline: the methods whose RMSE is not below it."""
  notes = []
  for label, rows in blocks:
    floor = next((r['rmse'] for r in rows if r['method'] == BIAS), None)
    if floor is not None:
      losers = [r['method'] for r in rows if r['method'] != BIAS and r['rmse'] >= floor]
      notes.append(f'{label}: RMSE not below the {BIAS} ({floor:.4f}): {", ".join(losers)}'
                   if losers else
                   f'{label}: every other method\'s RMSE is below the {BIAS} ({floor:.4f})')
  return [''] + notes if notes else []


def _extra_table(blocks: List[Tuple[str, List[dict]]]) -> List[str]:
  """Metrics not in the paper: Precision@k with relevant = rating >= 4, NDCG@k."""
  rows = [(label, r) for label, block in blocks for r in block if EXTRA_METRICS[0] in r]
  if not rows:
    return []
  return ['', 'Not in the paper (the paper\'s Precision@k counts rating 5 only):', '',
          markdown_table(['setting', 'method', *EXTRA_HEADERS],
                         [[label, r['method'], *(f'{100 * r[m]:.2f}%' if m.startswith('precision')
                                                 else f'{r[m]:.4f}' for m in EXTRA_METRICS)]
                          for label, r in rows])]


def format_table(blocks: List[Tuple[str, List[dict]]]) -> str:
  """Table 3 layout: per "p% Support" block, RMSE and Precision@k per method (and, under model
  selection, the kept episode), then the relative improvement of MAML (and of MAML(pre-trained
  start), when it ran) over NN(pre-trained);
  then which methods do not beat the bias baseline's RMSE, the extra metrics' table and the
  parameter counts."""
  table = []
  kept = any('selected_episode' in r for _, rows in blocks for r in rows)
  for label, rows in blocks:
    by = {r['method']: r for r in rows}
    for r in rows:
      table.append([label, r['method'], f'{r["rmse"]:.4f}',
                    *(f'{100 * r[f"precision@{k}"]:.2f}%' for k in K_VALUES)]
                   + ([r.get('selected_episode', '')] if kept else []))
    for meta in IMPROVED:
      if meta not in by or 'NN(pre-trained)' not in by:
        continue
      m, n = by[meta], by['NN(pre-trained)']
      table.append([label, f'Improvement ({meta} vs NN(pre-trained))',
                    f'{100 * (n["rmse"] - m["rmse"]) / n["rmse"]:.2f}%',
                    *(f'{100 * (m[k] - n[k]) / n[k]:.2f}%' if n[k] else 'n/a'
                      for k in (f'precision@{k}' for k in K_VALUES))] + ([''] if kept else []))
  lines = [markdown_table(['setting', 'method', 'RMSE', *(f'Precision@{k}' for k in K_VALUES)]
                          + (['kept episode (lowest validation RMSE)'] if kept else []), table)]
  lines += _floor_notes(blocks) + _extra_table(blocks)
  sizes = {r['method']: r for _, rows in blocks for r in rows if r.get('model_params')}
  if sizes:
    lines += ['', markdown_table(['method', '# parameters: algorithm', 'model'],
                                 [[m, r['algorithm_params'], r['model_params']]
                                  for m, r in sizes.items()])]
  return '\n'.join(lines)
