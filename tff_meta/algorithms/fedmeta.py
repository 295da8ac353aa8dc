"""FedMeta with MAML, first-order MAML and Meta-SGD.

Chen et al. 2018, "Federated Meta-Learning with Fast Convergence and Efficient
Communication", Algorithm 1 and Eqs. 2-3:
- client u adapts theta on its support set,
  theta_u = theta - alpha (o) grad L_S(theta)   (one or more unrolled steps),
- and returns g_u = grad_{theta[, alpha]} L_Q(theta_u), the gradient of the
  query loss with respect to the *original* parameters (second order for MAML
  and Meta-SGD; inner gradient held constant for FOMAML);
- the server applies (theta[, alpha]) <- (theta[, alpha]) - (beta/m) sum_u g_u
  (SGD, Alg. 1 l. 8) or Adam with rate beta (Appendix A.2).
Meta-SGD's alpha is a per-parameter tensor list in the server state next to
theta, initialised to the scalar `inner_lr`.
The loss is pluggable (`losses.Loss`): cross-entropy by default, squared error
for rating prediction (Chen et al. 2018b, Sec. 3.1; `tff_meta.recommendation`).

Client work type signature:
    (<weights=[...][, rates=[...]]>, <support_x,support_y,query_x,query_y>)
      -> <weighted_update, weight, metrics, num_clients, num_rejected>
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import tensorflow as tf

from tff_meta.algorithms import base, process
from tff_meta.evaluation import flops, personalized
from tff_meta.learning import adaptation, losses

VARIANTS = ('maml', 'fomaml', 'metasgd')


def meta_gradient(model, params, data, *, inner_lr, inner_steps, first_order,
                  loss=losses.CROSS_ENTROPY):
  """Pure TF: (g_u, query logits) for one client's episode.

  `params` holds `weights` and, for Meta-SGD, per-parameter `rates`; `loss`
  is a `losses.Loss` (cross-entropy by default).
  """
  flat = tf.nest.flatten(params)
  with tf.GradientTape() as tape:
    tape.watch(flat)
    rates = personalized.rates_of(params, inner_lr)
    support_loss = lambda w: loss.value(model.logits(w, data['support_x']), data['support_y'])
    adapted = adaptation.sgd_adapt(support_loss, params['weights'], rates, inner_steps, first_order)
    query_logits = model.logits(adapted, data['query_x'])
    query_loss = loss.value(query_logits, data['query_y'])
  grads = tf.nest.pack_sequence_as(params, adaptation.dense(tape.gradient(query_loss, flat)))
  return grads, query_logits


def _client_fn(model, inner_lr, inner_steps, first_order, loss, params, data):
  grads, query_logits = meta_gradient(
      model, params, data, inner_lr=inner_lr, inner_steps=inner_steps, first_order=first_order,
      loss=loss)
  stats = loss.stats(query_logits, data['query_y'])
  num_support, num_query = tf.size(data['support_y']), tf.size(data['query_y'])
  # An episode needs both sets; 0 examples makes the process reject the client.
  usable = tf.logical_and(num_support > 0, num_query > 0)
  return grads, tf.where(usable, num_support + num_query, 0), stats


def build_fedmeta_process(model, *, variant: str, inner_lr: float, inner_steps: int,
                          server_optimizer, weighting: str = 'uniform',
                          loss: losses.Loss = losses.CROSS_ENTROPY, model_aggregator=None):
  """The FedMeta `IterativeProcess` for `variant` in ('maml', 'fomaml', 'metasgd').

  `loss` (a `losses.Loss`) sets the training loss, the round metrics and the
  label dtype of the episodes (int32 classes, or float32 ratings).
  `model_aggregator` aggregates the meta-gradients (`aggregation`; None = the mean).
  """
  if variant not in VARIANTS:
    raise ValueError(f'Unknown FedMeta variant {variant!r}; use one of {VARIANTS}.')
  if inner_steps < 1:
    raise ValueError(f'FedMeta needs inner_steps >= 1, got {inner_steps}.')
  params = collections.OrderedDict(weights=model.initial_trainable)
  if variant == 'metasgd':
    params['rates'] = [np.full(w.shape, inner_lr, np.float32) for w in model.initial_trainable]
  return process.build_federated_process(
      initial_params=params,
      client_fn=functools.partial(_client_fn, model, inner_lr, inner_steps, variant == 'fomaml',
                                  loss),
      client_data_spec=personalized.episode_spec(model, loss.y_dtype),
      server_optimizer=server_optimizer, weighting=weighting, model_aggregator=model_aggregator)


def _build(model, hp: base.Hparams, *, variant: str, name: str, display_name: str,
           model_aggregator=None):
  proc = build_fedmeta_process(
      model, variant=variant, inner_lr=hp.inner_lr, inner_steps=hp.inner_steps,
      server_optimizer=base.build_optimizer(hp.server_optimizer, hp.server_lr),
      weighting=hp.weighting or 'uniform',
      model_aggregator=model_aggregator)
  steps = hp.eval_inner_steps if hp.eval_inner_steps >= 0 else hp.inner_steps

  evaluate = personalized.build_personalized_evaluation(
      model, proc.params_type, personalized.sgd_adapter(model, hp.inner_lr, steps))
  return base.Algorithm(name=name, display_name=display_name, process=proc,
                        evaluate=evaluate, train_data='episode',
                        client_flops=flops.client_flops_fn(name, model, hp))


for _variant, _name, _display in (('maml', 'fedmeta_maml', 'FedMeta(MAML)'),
                                  ('fomaml', 'fedmeta_fomaml', 'FedMeta(FOMAML)'),
                                  ('metasgd', 'fedmeta_metasgd', 'FedMeta(Meta-SGD)')):
  base.ALGORITHMS.add(_name, functools.partial(
      _build, variant=_variant, name=_name, display_name=_display))
