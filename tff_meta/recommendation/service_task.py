"""Service recommendation on an event log (FedMeta Sec. 4.3 Table 3, Appendix A.4;
Chen et al. 2018b Sec. 3.2, Tables 5-6).

Settings and methods (`METHODS`):
  META   maml_lr, metasgd_lr, maml_nn, metasgd_nn: FedMeta process, cross-entropy,
         C-class `logistic_regression` / `mlp` (one hidden layer of hidden_units)
  MIXED  nn_unified: an `mlp` over the global catalogue, pre-trained on training
         users (pretrain_steps, one user per step), fine-tuned on the support set
  SELF   mfu, mru, nb, lr_self, nn_self (one row per self_steps value)
Metrics: Top-1 and Top-4 accuracy over all query events (`metrics.top_k_accuracy`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np

from tff_meta.core.tables import markdown_table
from tff_meta.learning import losses
from tff_meta.models import build_model_spec
from tff_meta.recommendation import baselines, event_log, methods, metrics, service
from tff_meta.recommendation.training import Trainer
from tff_meta.core.registry import Registry

K_VALUES = (1, 4)
SETTINGS = {'maml_lr': 'META', 'metasgd_lr': 'META', 'maml_nn': 'META', 'metasgd_nn': 'META',
            'nn_unified': 'MIXED', 'mfu': 'SELF', 'mru': 'SELF', 'nb': 'SELF', 'lr_self': 'SELF',
            'nn_self': 'SELF'}


def load_log(cfg) -> event_log.EventLog:
  """`data_path`: a CSV/Parquet log, an ml-100k folder (events = genres), or '' (synthetic)."""
  if cfg.data_path and os.path.isdir(cfg.data_path):
    frame = event_log.movielens_events(cfg.data_path)
    source = f'MovieLens-100k genre events from {cfg.data_path}'
    context = ()
  elif cfg.data_path:
    return event_log.read_event_log(cfg.data_path, min_events=cfg.min_events,
                                    sort=cfg.sort_log)
  else:
    frame = event_log.generate_event_log(cfg.synthetic_users,
                                         num_services=cfg.synthetic_services, seed=cfg.seed)
    source = f'synthetic event log (seed {cfg.seed})'
    context = ('location', 'network')
  return event_log.from_frame(frame, context, source)


def prepare(cfg) -> service.ServiceTasks:
  return service.service_tasks(load_log(cfg), support_fraction=cfg.support_fraction,
                               train_user_fraction=cfg.train_user_fraction,
                               query_fraction=cfg.query_fraction, max_classes=cfg.max_classes,
                               seed=cfg.seed)


def score(scores: Sequence[np.ndarray], labels: Sequence[np.ndarray]) -> Dict[str, float]:
  return {f'top{k}': metrics.top_k_accuracy(scores, labels, k) for k in K_VALUES}


def _local_model(cfg, data: service.ServiceTasks, kind: str):
  options = {'hidden_units': (cfg.hidden_units,)} if kind == 'mlp' else {}
  return build_model_spec(kind, (data.encoder.local_dim,), cfg.max_classes, seed=cfg.seed,
                          **options)


def _curve_users(cfg, users):
  return users[:cfg.eval_users] if cfg.eval_users > 0 else users


def _meta(cfg, data: service.ServiceTasks, show_progress: bool, *, variant: str, kind: str,
          display: str, name: str):
  log = data.log

  def train_batch(episode):
    return [service.training_episode(
        data.encoder, data.train_ids[i], log.users[data.train_ids[i]], max_events=cfg.max_events,
        support_fraction=cfg.train_support_fraction, seed=cfg.seed, episode_num=episode).tensors()
        for i in methods.sample_users(len(data.train_ids), cfg, episode)]

  episodes = lambda users: [u.episode for u in users]
  return methods.meta_learning(
      cfg, name=name, display=display, variant=variant, model=_local_model(cfg, data, kind),
      loss=losses.CROSS_ENTROPY, train_batch=train_batch, test=episodes(data.test),
      curve_test=episodes(_curve_users(cfg, data.test)),
      score=lambda preds, eps: score(preds, [e.query_y for e in eps]),
      show_progress=show_progress)


def nn_unified(cfg, data: service.ServiceTasks, show_progress: bool):
  """MIXED: pre-trained unified classifier, fine-tuned per test user (finetune steps)."""
  enc = data.encoder
  model = build_model_spec('mlp', (enc.unified_dim,), len(enc.items), seed=cfg.seed,
                           hidden_units=(cfg.hidden_units,))
  pre = Trainer(model, losses.CROSS_ENTROPY, cfg.pretrain_optimizer, cfg.pretrain_lr,
                cfg.batch_size)
  tune = Trainer(model, losses.CROSS_ENTROPY, cfg.self_optimizer, cfg.self_lr, cfg.batch_size)

  def user_data(step):
    uid = data.train_ids[methods.sample_user(len(data.train_ids), cfg, step)]
    return enc.unified(uid, data.log.users[uid])

  def evaluate(weights, users):
    preds = [tune.predict(tune.fit(weights, u.unified.support_x, u.unified.support_y,
                                   cfg.finetune, seed=cfg.seed), u.unified.query_x)
             for u in users]
    return score(preds, [u.unified.query_y for u in users])

  cfg_steps = dataclasses.replace(cfg, episodes=cfg.pretrain_steps)
  return methods.pretraining(cfg_steps, name='nn_unified', display='NN-unified', model=model,
                             trainer=pre, episodes=cfg.pretrain_steps, user_data=user_data,
                             evaluate=evaluate, test=data.test,
                             curve_test=_curve_users(cfg, data.test), show_progress=show_progress)


def _self_result(display: str, scores, data) -> methods.MethodResult:
  return methods.MethodResult(display, score(scores, [u.episode.query_y for u in data.test]))


def mfu(cfg, data, show_progress):
  del show_progress
  return _self_result('MFU', [baselines.mfu_scores(u.episode.support_y, len(u.episode.query_y),
                                                   cfg.max_classes) for u in data.test], data)


def mru(cfg, data, show_progress):
  del show_progress
  return _self_result('MRU', [baselines.mru_scores(u.history_labels, u.query_start,
                                                   len(u.episode.query_y), cfg.max_classes)
                              for u in data.test], data)


def nb(cfg, data, show_progress):
  del show_progress
  return _self_result('NB', [baselines.naive_bayes_scores(u.support_cat, u.episode.support_y,
                                                          u.query_cat, cfg.max_classes)
                             for u in data.test], data)


def _trained_self(cfg, data, show_progress, *, kind: str, display: str):
  del show_progress
  model = _local_model(cfg, data, kind)
  trainer = Trainer(model, losses.CROSS_ENTROPY, cfg.self_optimizer, cfg.self_lr, cfg.batch_size)
  results = []
  for steps in cfg.self_step_list:
    preds = [trainer.predict(trainer.fit(model.initial_trainable, u.episode.support_x,
                                         u.episode.support_y, steps, seed=cfg.seed),
                             u.episode.query_x) for u in data.test]
    result = _self_result(f'{display} {steps} steps', preds, data)
    result.algorithm_params = result.model_params = model.num_parameters
    results.append(result)
  return results


METHODS: Registry = Registry('service method')
for _name, _variant, _kind, _display in (
    ('maml_lr', 'maml', 'logistic_regression', 'MAML + LR'),
    ('metasgd_lr', 'metasgd', 'logistic_regression', 'Meta-SGD + LR'),
    ('maml_nn', 'maml', 'mlp', 'MAML + NN'),
    ('metasgd_nn', 'metasgd', 'mlp', 'Meta-SGD + NN')):
  METHODS.add(_name, functools.partial(_meta, variant=_variant, kind=_kind, display=_display,
                                       name=_name))
METHODS.add('nn_unified', nn_unified)
METHODS.add('mfu', mfu)
METHODS.add('mru', mru)
METHODS.add('nb', nb)
METHODS.add('lr_self', functools.partial(_trained_self, kind='logistic_regression', display='LR'))
METHODS.add('nn_self', functools.partial(_trained_self, kind='mlp', display='NN'))
DEFAULT_METHODS = ('nn_unified', 'mfu', 'mru', 'nb', 'lr_self', 'nn_self', 'maml_lr',
                   'metasgd_lr', 'maml_nn', 'metasgd_nn')


def format_table(blocks: List[Tuple[str, List[dict]]]) -> str:
  """Table 6 layout (Top 1 / Top 4 per support block), then Table 5 (parameter counts)."""
  order = []
  for _, rows in blocks:
    order += [r for r in rows if r['method'] not in [o['method'] for o in order]]
  table = []
  for first in order:
    cells = []
    for _, rows in blocks:
      r = next((x for x in rows if x['method'] == first['method']), None)
      cells += ([f'{100 * r[f"top{k}"]:.2f}%' for k in K_VALUES] if r else [''] * len(K_VALUES))
    table.append([first['setting'], first['method'], *cells])
  lines = [markdown_table(['setting', 'method', *(f'{label} Top {k}' for label, _ in blocks
                                                  for k in K_VALUES)], table),
           '', markdown_table(['method', '# parameters: algorithm', 'model'],
                              [[r['method'], r['algorithm_params'], r['model_params']]
                               for r in order if r['setting'] in ('META', 'MIXED')])]
  return '\n'.join(lines)
