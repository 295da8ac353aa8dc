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
import dataclasses
import functools

import numpy as np
import tensorflow as tf

from tff_meta.algorithms import base, hparams, process
from tff_meta.evaluation import flops, personalized
from tff_meta.learning import inner_loop, losses

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
    adapted = inner_loop.sgd_adapt(support_loss, params['weights'], rates, inner_steps, first_order)
    query_logits = model.logits(adapted, data['query_x'])
    query_loss = loss.value(query_logits, data['query_y'])
  grads = tf.nest.pack_sequence_as(params, inner_loop.dense(tape.gradient(query_loss, flat)))
  return grads, query_logits


def sliced_meta_gradient(model, params, data, *, inner_lr, inner_steps, first_order,
                         loss=losses.CROSS_ENTROPY, size=None):
  """Pure TF: (g_u, query stats) of `meta_gradient`, in the memory of one slice of examples.

  The same math, with reverse mode through the K inner steps written out so
  that every full-set quantity is a sum over slices (`learning.inner_loop`):
    theta_0 = theta, theta_{k+1} = theta_k - alpha o grad L_S(theta_k);
    v_K = grad L_Q(theta_K) (with the query stats of theta_K);
    for k = K-1 ... 0:  g_alpha -= grad L_S(theta_k) o v_{k+1},
                        v_k = v_{k+1} - H_S(theta_k) (alpha o v_{k+1});
  g_theta = v_0 (FedMeta Eq. 2 for one step: (I - alpha H_S) grad L_Q(theta')).
  FOMAML holds the inner gradient constant, so H_S drops out: v_k = v_{k+1}.
  """
  rates = personalized.rates_of(params, inner_lr)
  per_weight = isinstance(rates, (list, tuple))
  scaled = lambda v: [a * x for a, x in zip(rates, v)] if per_weight else [rates * x for x in v]
  slice_loss = lambda w, x, y: loss.value(model.logits(w, x), y)
  sx, sy, qx, qy = data['support_x'], data['support_y'], data['query_x'], data['query_y']
  thetas, support_grads = [], []   # theta_k and grad L_S(theta_k), k < K, kept for reverse mode

  def support_gradient(weights):
    thetas.append(weights)
    support_grads.append(inner_loop.mean_gradient(slice_loss, weights, sx, sy, size))
    return support_grads[-1]

  adapted = inner_loop.descend(support_gradient, params['weights'], rates, inner_steps)
  v, stats = inner_loop.mean_gradient(lambda w, x, y: _loss_and_outputs(model, loss, w, x, y),
                                  adapted, qx, qy, size, stats_fn=loss.stats)
  rate_grads = [tf.zeros_like(w) for w in v] if per_weight else None
  for k in reversed(range(inner_steps)):
    if per_weight:
      rate_grads = [r - g * x for r, g, x in zip(rate_grads, support_grads[k], v)]
    if not first_order:
      hv = inner_loop.mean_hessian_product(slice_loss, thetas[k], scaled(v), sx, sy, size)
      v = [x - h for x, h in zip(v, hv)]
  grads = collections.OrderedDict(weights=v)
  if per_weight:
    grads['rates'] = rate_grads
  return tf.nest.pack_sequence_as(params, tf.nest.flatten(grads)), stats


def _loss_and_outputs(model, loss, weights, x, y):
  outputs = model.logits(weights, x)
  return loss.value(outputs, y), outputs


def _client_fn(model, inner_lr, inner_steps, first_order, loss, slice_above, params, data):
  kw = dict(inner_lr=inner_lr, inner_steps=inner_steps, first_order=first_order, loss=loss)

  def full_batch():
    grads, query_logits = meta_gradient(model, params, data, **kw)
    return grads, loss.stats(query_logits, data['query_y'])

  num_support, num_query = tf.size(data['support_y']), tf.size(data['query_y'])
  if slice_above > 0:   # both branches are built, so only when asked for
    grads, stats = tf.cond(num_support + num_query > slice_above,
                           lambda: sliced_meta_gradient(model, params, data, **kw), full_batch)
  else:
    grads, stats = full_batch()
  # An episode needs both sets; 0 examples makes the process reject the client.
  usable = tf.logical_and(num_support > 0, num_query > 0)
  return grads, tf.where(usable, num_support + num_query, 0), stats


def build_fedmeta_process(model, *, variant: str, inner_lr: float, inner_steps: int,
                          server_optimizer, weighting: str = 'uniform',
                          loss: losses.Loss = losses.CROSS_ENTROPY, model_aggregator=None,
                          slice_above: int = 0):
  """The FedMeta `IterativeProcess` for `variant` in ('maml', 'fomaml', 'metasgd').

  A client with more than `slice_above` support + query examples computes
  its meta-gradient slice by slice (`sliced_meta_gradient`: the same math in
  the memory of one slice; the character LSTM's second-order pass keeps about
  1.7 MB per example, and a Shakespeare role can hold 38,000); 0 = every
  client in one batch (`meta_gradient`).

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
                                  loss, slice_above),
      client_data_spec=personalized.episode_spec(model, loss.y_dtype),
      server_optimizer=server_optimizer, weighting=weighting, model_aggregator=model_aggregator)


@dataclasses.dataclass(frozen=True)
class FedMetaHparams(hparams.Base, hparams.InnerLoop, hparams.MetaServer):
  """alpha (inner_lr), the inner steps and the server's beta (server_lr) of Alg. 1; clients
  past `slice_clients_above` examples compute in slices (`build_fedmeta_process`)."""
  slice_clients_above: int = hparams.field(
      0, 'FedMeta training: a client with more support + query examples computes its '
      'meta-gradient in slices (same math, bounded memory); 0 = always in one batch.',
      hparams.at_least(0))


# MAML's outer backward through one inner step, as a multiple of that step's
# fwd + bwd (reverse over reverse; see `round_flops`).
SECOND_ORDER_FACTOR = 2


def round_flops(variant: str, hp: FedMetaHparams, cost: flops.ModelCost, num_support: int,
                num_query: int, num_examples: int) -> int:
  """FLOPs of one client's episode (n_s, n_q examples; K = inner_steps; `evaluation.flops`).

  - FOMAML: K inner steps on the support set, K (n_s (F + B_F) + 2P) (fwd +
    bwd, then theta - alpha g), and the query set's fwd + bwd, n_q (F + B_F).
    The inner gradient is held constant, so the outer gradient passes back
    through the inner steps as the identity: nothing more.
  - MAML: FOMAML plus, per inner step, the outer backward pass through the
    inner gradient, a Hessian-vector product. TF computes it reverse over
    reverse: it differentiates the recorded support backward pass and the
    support forward pass again. Every product of the inner fwd + bwd is
    differentiated with respect to its two operands, so this costs
    SECOND_ORDER_FACTOR = 2 x the inner fwd + bwd: 2 n_s (F + B_F) per step,
    + 2P (scale by alpha and accumulate). Counting the graph TF builds
    confirms it: in MAML's client graph every support-set matrix product
    appears 3 times, in FOMAML's once. (Pearlmutter's forward-over-reverse
    product would cost about one fwd + bwd; TF's tape does not use it.)
    MAML = K (3 n_s (F + B_F) + 4P) + n_q (F + B_F).
  - Meta-SGD: MAML plus the per-parameter rate products: the gradient with
    respect to alpha, v (o) g, is P more multiplications per inner step.
  """
  del num_examples
  step, p, k = cost.train_step, cost.params, hp.inner_steps
  total = k * (num_support * step + 2 * p) + num_query * step
  if variant != 'fomaml':
    total += k * (SECOND_ORDER_FACTOR * num_support * step + 2 * p)
  if variant == 'metasgd':
    total += k * p
  return total


def _build(model, hp: FedMetaHparams, *, variant: str, model_aggregator=None):
  proc = build_fedmeta_process(
      model, variant=variant, inner_lr=hp.inner_lr, inner_steps=hp.inner_steps,
      server_optimizer=base.meta_server_optimizer(hp), weighting=hp.weighting or 'uniform',
      model_aggregator=model_aggregator, slice_above=hp.slice_clients_above)
  evaluate = personalized.build_personalized_evaluation(
      model, proc.params_type,
      personalized.sgd_adapter(model, hp.inner_lr, hp.eval_steps(hp.inner_steps)))
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='episode')


base.register(*base.variant_entries(_build, FedMetaHparams, 'FedMeta', (
    ('maml', 'fedmeta_maml', 'FedMeta(MAML)',
     'FedMeta(MAML): second-order meta-gradient of the query loss'),
    ('fomaml', 'fedmeta_fomaml', 'FedMeta(FOMAML)',
     'FedMeta(FOMAML): the same with the inner gradient held constant'),
    ('metasgd', 'fedmeta_metasgd', 'FedMeta(Meta-SGD)',
     'FedMeta(Meta-SGD): also learns a per-parameter inner rate α')), round_flops))
