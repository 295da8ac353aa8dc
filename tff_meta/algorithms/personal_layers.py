"""Personalization layers: FedPer, LG-FedAvg, FedRep and FedMeta+FedPer.

All four split the model (`tff_meta.models.split`, hparam `personal_layers`)
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
- **FedMeta+FedPer** (report 003 Sec. 6): the shared layers are meta-learned
  with MAML or Meta-SGD (FedMeta Alg. 1; `fedmeta.meta_gradient`), the
  personal fully connected layers stay on the client, which moves them along
  their own meta-gradient with rate `client_lr`.

Evaluation (report 003 Sec. 5.2-5.3): a known ("old") client uses its own
personal part. A new client tries `new_client_candidates` personal parts
stored by training clients and keeps the one with the lowest loss on its
support set (LG-FedAvg's test, which the report adopts for its proposed
method). FedRep then fits the head on the support set, and FedMeta+FedPer
adapts the whole model with its inner loop.

Type signatures (S = shared weights, L = personal weights, C = <visits=float32, personal=L>):
    client work: (<weights=S[, rates=...]>, C, D) -> <contribution, C>
    evaluate: (<params@SERVER, K@SERVER, {C}@CLIENTS, {E}@CLIENTS> -> {M}@CLIENTS)
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import tensorflow as tf

from tff_meta.algorithms import base, fedmeta, stateful
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
    support_losses = tf.stack([
        losses.cross_entropy(model.logits(split.merge(shared, [c[k] for c in stacked]), support_x),
                             support_y) for k in range(count)])
    best = tf.argmin(support_losses, output_type=tf.int32)
    return [tf.gather(c, best) for c in stacked]

  return tf.cond(client_state['visits'] > 0.0, lambda: list(client_state['personal']),
                 best_stored)


def _initial_state(split, model):
  return stateful.with_visits({'personal': split.take_personal(model.initial_trainable)})


def _build(model, hp: base.Hparams, *, kind: str, name: str, display_name: str, variant: str = '',
           model_aggregator=None):
  if hp.local_epochs < 1 or hp.batch_size < 1:
    raise ValueError(f'{display_name} needs local_epochs and batch_size >= 1, got '
                     f'{hp.local_epochs}, {hp.batch_size}.')
  if hp.new_client_candidates < 1:
    raise ValueError(f'new_client_candidates must be >= 1, got {hp.new_client_candidates}.')
  split = split_lib.resolve(model, hp.personal_layers, flip=(kind == 'lg'))
  optimizer = base.build_optimizer(hp.client_optimizer, hp.client_lr)
  params = collections.OrderedDict(weights=split.take_shared(model.initial_trainable))
  steps = hp.eval_inner_steps if hp.eval_inner_steps >= 0 else hp.inner_steps
  if kind == 'meta':
    if hp.inner_steps < 1:
      raise ValueError(f'{display_name} needs inner_steps >= 1, got {hp.inner_steps}.')
    if variant == 'metasgd':
      params['rates'] = [np.full(w.shape, hp.inner_lr, np.float32) for w in model.initial_trainable]
    client_fn = functools.partial(_meta_client_fn, model, split, hp.inner_lr, hp.inner_steps,
                                  False, hp.client_lr)
    data_spec = personalized.episode_spec(model)
    server_optimizer = base.build_optimizer(hp.server_optimizer, hp.server_lr)
    weighting, train_data = hp.weighting or 'uniform', 'episode'
  else:
    if kind == 'fedrep':
      if hp.head_epochs < 1:
        raise ValueError(f'FedRep needs head_epochs >= 1, got {hp.head_epochs}.')
      client_fn = functools.partial(_fedrep_client_fn, model, split, optimizer, hp.head_epochs,
                                    hp.local_epochs, hp.batch_size)
    else:
      client_fn = functools.partial(_joint_client_fn, model, split, optimizer, hp.local_epochs,
                                    hp.batch_size)
    data_spec = _full_data_spec(model)
    server_optimizer = base.build_optimizer(hp.fedavg_server_optimizer, hp.fedavg_server_lr)
    weighting, train_data = hp.weighting or 'num_examples', 'full'
  proc = stateful.build_stateful_process(
      initial_params=params, initial_client_state=_initial_state(split, model),
      client_fn=client_fn, client_data_spec=data_spec, server_optimizer=server_optimizer,
      weighting=weighting, model_aggregator=model_aggregator)

  def personalize(params, candidates, client_state, support_x, support_y):
    shared = params['weights']
    personal = choose_personal(model, split, shared, candidates, client_state, support_x, support_y)
    if kind == 'fedrep':   # new clients fit the head; known ones keep theirs
      fit = lambda: _fit_head(model, split, optimizer, hp.head_epochs, hp.batch_size, shared,
                              personal, support_x, support_y)[0]
      personal = tf.cond(client_state['visits'] > 0.0, lambda: list(personal), fit)
    full = split.merge(shared, personal)
    if kind == 'meta':
      full = personalized.adapt_on_support(model, full, personalized.rates_of(params, hp.inner_lr),
                                           steps, support_x, support_y)
    return full

  evaluate = stateful.build_stateful_evaluation(model, proc, personalize,
                                                num_candidates=hp.new_client_candidates)
  return base.Algorithm(name=name, display_name=display_name, process=proc, evaluate=evaluate,
                        train_data=train_data, num_candidates=hp.new_client_candidates)


for _name, _display, _kind, _variant in (
    ('fedper', 'FedPer', 'joint', ''),
    ('lg_fedavg', 'LG-FedAvg', 'lg', ''),
    ('fedrep', 'FedRep', 'fedrep', ''),
    ('fedmeta_fedper_maml', 'FedMeta(MAML)+FedPer', 'meta', 'maml'),
    ('fedmeta_fedper_metasgd', 'FedMeta(Meta-SGD)+FedPer', 'meta', 'metasgd')):
  base.ALGORITHMS.add(_name, functools.partial(
      _build, kind=_kind, name=_name, display_name=_display, variant=_variant))
