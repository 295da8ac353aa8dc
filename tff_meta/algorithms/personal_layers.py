"""Personalization layers: FedPer, LG-FedAvg, FedRep, FedAvg(Meta)+FedPer and FedMeta+FedPer.

All five split the model (`tff_meta.models.split`, hparam `personal_layers`)
into a shared part, which is the server's parameter, and a personal part, which
is each client's state (`algorithms.stateful`). They differ only in the client
work and in how a client personalizes at evaluation:

- **FedPer** (Arivazhagan et al. 2019; report 003 Sec. 5.1, Algorithms 1-2):
  base layers shared, the personal (head) layers stay on the client; the
  client trains both with SGD for E local epochs and sends the base back;
  the server averages bases weighted by examples.
- **LG-FedAvg** (Liang et al. 2020; report 003 Sec. 5.2, Algorithm 1): the
  mirror image: the *representation* layers are local and the head is
  global. Here `personal_layers` names the global head (default "-1"), and
  every other layer stays on the client.
- **FedRep** (Collins et al. 2021, Alg. 1): body shared, head personal; the
  client first trains the head for `head_epochs` with the body fixed, then
  the body for `local_epochs` with the head fixed, and sends the body.
- **FedAvg(Meta)+FedPer** (report 003 Sec. 6.3, the second table's FedAvgMeta
  column): FedPer's training; at evaluation the client's personal part
  (below) and then FedAvg(Meta)'s fine-tuning of the whole model,
  `finetune_epochs` epochs of the client optimizer on the support set
  (FedMeta Sec. 4.2).
- **FedMeta+FedPer** (report 003 Sec. 6): the shared layers are meta-learned
  with MAML or Meta-SGD (FedMeta Alg. 1; `fedmeta.meta_gradient`), the
  personal fully connected layers stay on the client, which moves them along
  their own meta-gradient with rate `client_lr`.

Evaluation (report 003 Sec. 5.2-5.3): a known ("old") client uses its own
personal part. A new client tries `new_client_candidates` personal parts
stored by training clients and keeps the one with the lowest loss on its
support set (LG-FedAvg's test, which the report adopts for its proposed
method). FedRep then fits the head on the support set, FedAvg(Meta)+FedPer
fine-tunes the whole model on it, and FedMeta+FedPer adapts the whole model
with its inner loop. (A known client's support set is all its training data.)

Type signatures (S = shared weights, L = personal weights, C = <visits=float32, personal=L>):
    client work: (<weights=S[, rates=...]>, C, D) -> <contribution, C>
    evaluate: (<params@SERVER, K@SERVER, {C}@CLIENTS, {E}@CLIENTS> -> {M}@CLIENTS)
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Callable

import numpy as np
import tensorflow as tf

from tff_meta.algorithms import base, fedavg, fedmeta, hparams, stateful
from tff_meta.evaluation import personalized
from tff_meta.learning import local_training, losses
from tff_meta.models import split as split_lib


def _full_data_spec(model):
  return collections.OrderedDict(x=model.x_spec, y=tf.TensorSpec([None], tf.int32))


def _joint_client_fn(model, split, optimizer, epochs, batch_size, params, client_state, data):
  """FedPer / LG-FedAvg: SGD on all layers; the shared part goes back."""
  full = split.merge(params['weights'], client_state['personal'])
  trained, stats = local_training.train_minibatches(
      model.logits, full, data['x'], data['y'], optimizer, epochs, batch_size)
  shared = split.take_shared(trained)
  update = collections.OrderedDict(
      weights=local_training.pseudo_gradient(params['weights'], shared))
  new_state = collections.OrderedDict(visits=client_state['visits'],
                                      personal=split.take_personal(trained))
  return update, tf.size(data['y']), local_training.per_epoch(stats, epochs), new_state


def _fit_head(model, split, optimizer, epochs, batch_size, shared, head, x, y):
  logits = lambda p, bx: model.logits(split.merge(shared, p), bx)
  return local_training.train_minibatches(logits, head, x, y, optimizer, epochs, batch_size)


def _fedrep_client_fn(model, split, optimizer, head_epochs, epochs, batch_size, params,
                      client_state, data):
  """FedRep: head with the body fixed, then the body with the new head fixed."""
  head, _ = _fit_head(model, split, optimizer, head_epochs, batch_size, params['weights'],
                      client_state['personal'], data['x'], data['y'])
  body_logits = lambda b, bx: model.logits(split.merge(b, head), bx)
  body, stats = local_training.train_minibatches(
      body_logits, params['weights'], data['x'], data['y'], optimizer, epochs, batch_size)
  update = collections.OrderedDict(
      weights=local_training.pseudo_gradient(params['weights'], body))
  new_state = collections.OrderedDict(visits=client_state['visits'], personal=head)
  return update, tf.size(data['y']), local_training.per_epoch(stats, epochs), new_state


def _meta_client_fn(model, split, inner_lr, inner_steps, first_order, personal_lr, params,
                    client_state, data):
  """FedMeta+FedPer: meta-gradient of the full model; shared part to the server."""
  full = collections.OrderedDict(weights=split.merge(params['weights'], client_state['personal']))
  if 'rates' in params:
    full['rates'] = params['rates']
  grads, query_logits = fedmeta.meta_gradient(model, full, data, inner_lr=inner_lr,
                                              inner_steps=inner_steps, first_order=first_order)
  update = collections.OrderedDict(weights=split.take_shared(grads['weights']))
  if 'rates' in params:
    update['rates'] = grads['rates']
  personal = [p - personal_lr * g for p, g in
              zip(client_state['personal'], split.take_personal(grads['weights']))]
  num_support, num_query = tf.size(data['support_y']), tf.size(data['query_y'])
  usable = tf.logical_and(num_support > 0, num_query > 0)
  new_state = collections.OrderedDict(visits=client_state['visits'], personal=personal)
  return (update, tf.where(usable, num_support + num_query, 0),
          losses.batch_stats(query_logits, data['query_y']), new_state)


def choose_personal(model, split, shared, candidates, client_state, support_x, support_y):
  """A known client's own personal part; for a new one, the best stored candidate on its support."""
  stacked = candidates['personal']
  count = int(stacked[0].shape[0])

  def best_stored():   # only new clients pay for scoring the candidates
    support_losses = tf.stack([   # summed losses: the same argmin as the means
        personalized.score(model, split.merge(shared, [c[k] for c in stacked]), support_x,
                           support_y)['loss_sum'] for k in range(count)])
    best = tf.argmin(support_losses, output_type=tf.int32)
    return [tf.gather(c, best) for c in stacked]

  return tf.cond(client_state['visits'] > 0.0, lambda: list(client_state['personal']),
                 best_stored)


def _initial_state(split, model):
  return stateful.with_visits({'personal': split.take_personal(model.initial_trainable)})


@dataclasses.dataclass(frozen=True)
class SplitHparams(hparams.Base):
  """The model split and LG-FedAvg's test on new clients (shared by the five methods)."""
  personal_layers: str = hparams.field(
      '-1', 'Layers kept on the client (FedPer, FedRep, FedMeta+FedPer: personal; LG-FedAvg: the '
      'shared head): comma-separated indices among layers with weights (-1 = last) or layer '
      'names.')
  new_client_candidates: int = hparams.field(
      8, 'LG-FedAvg / FedMeta+FedPer test on new clients: how many stored local parts a new '
      'client tries (it keeps the best on its support set).', hparams.at_least(1))

  def validate(self) -> None:
    if self.new_client_candidates < 1:
      raise ValueError(f'new_client_candidates must be >= 1, got {self.new_client_candidates}.')


@dataclasses.dataclass(frozen=True)
class FedPerHparams(SplitHparams, hparams.LocalTraining, hparams.FedAvgServer):
  """FedPer and LG-FedAvg: FedAvg's local training and server step on the shared part."""

  def validate(self) -> None:
    if self.local_epochs < 1 or self.batch_size < 1:
      raise ValueError(f'FedPer, LG-FedAvg and FedRep need local_epochs and batch_size >= 1, got '
                       f'{self.local_epochs}, {self.batch_size}.')
    super().validate()


@dataclasses.dataclass(frozen=True)
class FedAvgMetaFedPerHparams(FedPerHparams, fedavg.FedAvgMetaHparams):
  """FedPer's, plus FedAvg(Meta)'s fine-tuning epochs at evaluation."""


@dataclasses.dataclass(frozen=True)
class FedRepHparams(FedPerHparams):
  """FedPer's, plus the head's epochs before the body's."""
  head_epochs: int = hparams.field(
      10, 'FedRep: local epochs on the head (body fixed) before local_epochs on the body.',
      hparams.at_least(0))

  def validate(self) -> None:
    super().validate()
    if self.head_epochs < 1:
      raise ValueError(f'FedRep needs head_epochs >= 1, got {self.head_epochs}.')


@dataclasses.dataclass(frozen=True)
class FedMetaFedPerHparams(SplitHparams, hparams.InnerLoop, hparams.MetaServer,
                           hparams.ClientRate):
  """FedMeta's inner loop and server step for the shared layers; client_lr for the personal."""

  def validate(self) -> None:
    super().validate()
    if self.inner_steps < 1:
      raise ValueError(f'FedMeta+FedPer needs inner_steps >= 1, got {self.inner_steps}.')


def _joint_work(model, split, hp):
  return functools.partial(_joint_client_fn, model, split, base.client_optimizer(hp),
                           hp.local_epochs, hp.batch_size)


def _fedrep_work(model, split, hp):
  return functools.partial(_fedrep_client_fn, model, split, base.client_optimizer(hp),
                           hp.head_epochs, hp.local_epochs, hp.batch_size)


def _meta_work(model, split, hp):
  return functools.partial(_meta_client_fn, model, split, hp.inner_lr, hp.inner_steps, False,
                           hp.client_lr)


def _keep(model, split, hp, params, full, client_state, support_x, support_y):
  """Score the chosen personal part with the shared layers as they are (FedPer, LG-FedAvg)."""
  del model, split, hp, params, client_state, support_x, support_y
  return full


def _fit_new_head(model, split, hp, params, full, client_state, support_x, support_y):
  """FedRep: a new client fits the head on its support set; a known one keeps its own."""
  shared, personal = params['weights'], split.take_personal(full)
  fit = lambda: _fit_head(model, split, base.client_optimizer(hp), hp.head_epochs, hp.batch_size,
                          shared, personal, support_x, support_y)[0]
  personal = tf.cond(client_state['visits'] > 0.0, lambda: list(personal), fit)
  return split.merge(shared, personal)


def _fine_tune_all(model, split, hp, params, full, client_state, support_x, support_y):
  """FedAvg(Meta)+FedPer: FedAvg(Meta)'s fine-tuning of the whole model on the support set."""
  del split, params, client_state
  adapter = fedavg.minibatch_adapter(model, base.client_optimizer(hp), hp.finetune_epochs,
                                     hp.batch_size)
  return adapter({'weights': full}, support_x, support_y)


def _adapt_all(model, split, hp, params, full, client_state, support_x, support_y):
  """FedMeta+FedPer: the inner loop on the whole model (Meta-SGD: at its learned rates)."""
  del split, client_state
  return personalized.adapt_on_support(model, full, personalized.rates_of(params, hp.inner_lr),
                                       hp.eval_steps(hp.inner_steps), support_x, support_y)


def _full_data(model):
  return 'full', _full_data_spec(model)


def _episodes(model):
  return 'episode', personalized.episode_spec(model)


@dataclasses.dataclass(frozen=True)
class Method:
  """What sets one of the five methods apart (module docstring)."""
  hparams: type
  client_work: Callable   # (model, split, hp) -> client_fn
  personalize: Callable   # (model, split, hp, params, full, client_state, sx, sy) -> weights
  data: Callable = _full_data   # model -> (Algorithm.train_data, client data spec)
  server_optimizer: Callable = base.fedavg_server_optimizer
  weighting: str = 'num_examples'   # the default of `weighting`
  flip: bool = False   # `personal_layers` names the shared head (LG-FedAvg), not the personal part


FEDPER = Method(FedPerHparams, _joint_work, _keep)
LG_FEDAVG = Method(FedPerHparams, _joint_work, _keep, flip=True)
FEDAVG_META_FEDPER = Method(FedAvgMetaFedPerHparams, _joint_work, _fine_tune_all)
FEDREP = Method(FedRepHparams, _fedrep_work, _fit_new_head)
FEDMETA_FEDPER = Method(FedMetaFedPerHparams, _meta_work, _adapt_all, data=_episodes,
                        server_optimizer=base.meta_server_optimizer, weighting='uniform')


def _build(model, hp, *, method: Method, meta_sgd: bool = False, model_aggregator=None):
  split = split_lib.resolve(model, hp.personal_layers, flip=method.flip)
  params = collections.OrderedDict(weights=split.take_shared(model.initial_trainable))
  if meta_sgd:   # Meta-SGD's per-parameter rates alpha, from inner_lr
    params['rates'] = [np.full(w.shape, hp.inner_lr, np.float32) for w in model.initial_trainable]
  train_data, data_spec = method.data(model)
  proc = stateful.build_stateful_process(
      initial_params=params, initial_client_state=_initial_state(split, model),
      client_fn=method.client_work(model, split, hp), client_data_spec=data_spec,
      server_optimizer=method.server_optimizer(hp), weighting=hp.weighting or method.weighting,
      model_aggregator=model_aggregator)

  def personalize(params, candidates, client_state, support_x, support_y):
    shared = params['weights']
    personal = choose_personal(model, split, shared, candidates, client_state, support_x, support_y)
    return method.personalize(model, split, hp, params, split.merge(shared, personal),
                              client_state, support_x, support_y)

  evaluate = stateful.build_stateful_evaluation(model, proc, personalize,
                                                num_candidates=hp.new_client_candidates)
  return base.Algorithm(process=proc, evaluate=evaluate, train_data=train_data,
                        num_candidates=hp.new_client_candidates)


def _entry(name, display_name, method, description, source, meta_sgd=False):
  return base.AlgorithmEntry(
      name, display_name, method.hparams,
      functools.partial(_build, method=method, meta_sgd=meta_sgd),
      description=description, source=source)


base.register(
    _entry('fedper', 'FedPer', FEDPER,
           'FedPer: shared base, personal head kept on the client; *stateful*', 'report 003'),
    _entry('lg_fedavg', 'LG-FedAvg', LG_FEDAVG,
           'LG-FedAvg: personal representation, shared head; *stateful*', 'report 003'),
    _entry('fedrep', 'FedRep', FEDREP,
           'FedRep (Collins et al. 2021): head epochs, then body epochs; *stateful*', 'FedEC'),
    _entry('fedavg_meta_fedper', 'FedAvg(Meta)+FedPer', FEDAVG_META_FEDPER,
           'FedAvg(Meta)+FedPer: FedPer, then fine-tuning the whole model at evaluation; '
           '*stateful*', 'report 003'),
    _entry('fedmeta_fedper_maml', 'FedMeta(MAML)+FedPer', FEDMETA_FEDPER,
           'FedMeta(MAML)+FedPer: meta-gradient for the shared layers, personal layers stay; '
           '*stateful*', 'report 003'),
    _entry('fedmeta_fedper_metasgd', 'FedMeta(Meta-SGD)+FedPer', FEDMETA_FEDPER,
           'FedMeta(Meta-SGD)+FedPer: the same with Meta-SGD; *stateful*', 'report 003',
           meta_sgd=True))
