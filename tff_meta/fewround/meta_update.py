"""The FRL meta-update (Algorithm 1, lines 22-26), by name (`META_UPDATES`).

Park et al., "Few-Round Learning for Federated Learning", Sec. 3.2.2. Every client k takes
the query loss L^{Q_k}(theta_R, P_{R-1}) and its first-order meta-gradient
g_k = grad_{theta_R} L^{Q_k} (the paper's approximation of
grad_{phi_t} L = grad_{theta_R} L * d theta_R / d theta_0, dropping the second
derivatives). The two ways of turning the g_k into phi_{t+1}:

- `client_adam` (line 24 read literally): each client applies one step of the
  meta-optimizer (Adam, rate beta) from the shared optimizer state,
  phi_{t+1}(k) = Adam(phi_t, g_k), and the server takes the data-size
  (rho_k = |S_k| + |Q_k|) weighted mean of the phi_{t+1}(k) AND of the Adam
  moments (line 26). At Adam's first step every client moves about
  beta * sign(g_k), and the averaged second moment is mean_k(g_k^2), not
  (mean_k g_k)^2.
- `server_adam`: the clients send rho_k-weighted g_k; the server takes
  g = sum_k rho_k g_k / sum_k rho_k and applies ONE Adam step to phi_t with
  it: phi_{t+1} = Adam(phi_t, g). This is Adam on the mean first-order
  meta-gradient, i.e. the FedAvg-of-gradients reading of lines 24-26.

Both reject a client whose loss or update is not finite (weight 0) and keep
phi when no client is accepted. Each entry is a `MetaUpdate(client_fn,
server_fn)` of pure TF functions:
    client_fn(model, hp, optimizer, server, data) -> sums (weighted by rho_k)
    server_fn(hp, optimizer, state, total) -> new server state
where `server` = <phi, optimizer_state, meta_lr, round=<theta, protos, mask, ...>>.
"""

from __future__ import annotations

import collections
from typing import Callable, NamedTuple

import tensorflow as tf

from tff_meta.fewround import prototypes as proto_lib
from tff_meta.learning import inner_loop
from tff_meta.learning.inner_loop import all_finite
from tff_meta.core.registry import Registry


class MetaUpdate(NamedTuple):
  client_fn: Callable
  server_fn: Callable


META_UPDATES: Registry = Registry('meta-update')


def meta_lr(hp, episode: tf.Tensor) -> tf.Tensor:
  """beta, divided by 10 from `server_lr_decay_episode` on (the paper: after 2.0e4 rounds)."""
  decayed = tf.logical_and(hp.server_lr_decay_episode > 0, episode >= hp.server_lr_decay_episode)
  return tf.where(decayed, hp.server_lr / 10.0, hp.server_lr)


def query_gradient(model, hp, server, data, local_update, client_batch):
  """(first-order g_k = grad_{theta_R} L^{Q_k}, per-example losses, logits, query labels).

  With `hp.local_adaptation` (Appendix C, personalization) the client first
  adapts theta alone on its support set and uses its own prototypes.
  """
  theta = list(server['round']['theta'])
  protos, mask = server['round']['protos'], server['round']['mask']
  if hp.local_adaptation:
    support = client_batch(model, data, 'support')
    theta = local_update(model, hp, theta, support, protos, mask, 0.0)
    protos, counts = proto_lib.prototypes(model.embed(theta, support.x), support.y, model.ways)
    mask = tf.cast(counts > 0, tf.float32)
  theta = [tf.stop_gradient(w) for w in theta]
  query = client_batch(model, data, 'query')
  with tf.GradientTape() as tape:
    tape.watch(theta)
    logits = model.classifier.logits(model, theta, query.x, query.way_mask, protos, mask)
    losses = proto_lib.per_example_loss(logits, query.y)
    loss = tf.reduce_mean(losses)
  return inner_loop.dense(tape.gradient(loss, theta)), losses, logits, query.y


def _metrics(ok, losses, logits, labels, data):
  """rho_k (0 when rejected) and the query metrics' sums."""
  n_q = tf.cast(tf.size(labels), tf.float32)
  rho = tf.where(ok, n_q + tf.cast(tf.size(data['support_y']), tf.float32), 0.0)   # |D_k|
  correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
  return rho, collections.OrderedDict(
      weight=rho, loss_sum=tf.where(ok, tf.reduce_sum(losses), 0.0),
      correct=tf.where(ok, tf.reduce_sum(correct), 0.0), num_examples=tf.where(ok, n_q, 0.0))


def _weigh(ok, rho):
  return lambda t: tf.where(ok, tf.cast(t, tf.float32) * rho, tf.zeros_like(t, tf.float32))


def _mean(total):
  """sum / total weight, cast to `old`'s dtype (integers rounded); `old` if no weight."""
  accepted = total['weight'] > 0
  denominator = tf.maximum(total['weight'], 1e-12)

  def one(summed, previous):
    value = summed / denominator
    if previous.dtype.is_integer:
      value = tf.round(value)
    return tf.where(accepted, tf.cast(value, previous.dtype), previous)
  return one


def client_adam_client(model, hp, optimizer, server, data, local_update, client_batch):
  """Line 24 per client: phi_{t+1}(k) = Adam(phi_t, g_k) from the shared Adam state."""
  grads, losses, logits, labels = query_gradient(model, hp, server, data, local_update,
                                                 client_batch)
  opt_state = collections.OrderedDict(server['optimizer_state'])
  opt_state['learning_rate'] = server['meta_lr']
  opt_state, phi = optimizer.next(opt_state, list(server['phi']), list(grads))
  ok = tf.logical_and(all_finite(phi), tf.reduce_all(tf.math.is_finite(losses)))
  rho, out = _metrics(ok, losses, logits, labels, data)
  weigh = _weigh(ok, rho)
  out['phi'] = [weigh(w) for w in phi]
  out['optimizer_state'] = tf.nest.map_structure(weigh, opt_state)
  return out


def client_adam_server(hp, optimizer, state, total):
  """Line 26: rho-weighted mean of the phi_{t+1}(k) and of the optimizer states."""
  del hp, optimizer
  mean = _mean(total)
  return collections.OrderedDict(
      phi=[mean(s, o) for s, o in zip(total['phi'], state['phi'])],
      optimizer_state=tf.nest.map_structure(mean, total['optimizer_state'],
                                            state['optimizer_state']),
      episode=state['episode'] + 1)


def server_adam_client(model, hp, optimizer, server, data, local_update, client_batch):
  """The client's rho_k-weighted first-order meta-gradient g_k (no local step)."""
  del optimizer
  grads, losses, logits, labels = query_gradient(model, hp, server, data, local_update,
                                                 client_batch)
  ok = tf.logical_and(all_finite(grads), tf.reduce_all(tf.math.is_finite(losses)))
  rho, out = _metrics(ok, losses, logits, labels, data)
  out['grads'] = [_weigh(ok, rho)(g) for g in grads]
  return out


def server_adam_server(hp, optimizer, state, total):
  """phi_{t+1} = Adam(phi_t, sum_k rho_k g_k / sum_k rho_k), one step on the server."""
  accepted = total['weight'] > 0
  grads = [g / tf.maximum(total['weight'], 1e-12) for g in total['grads']]
  opt_state = collections.OrderedDict(state['optimizer_state'])
  opt_state['learning_rate'] = meta_lr(hp, state['episode'])
  new_opt, phi = optimizer.next(opt_state, list(state['phi']), grads)
  new_opt['learning_rate'] = state['optimizer_state']['learning_rate']
  keep = lambda new, old: tf.where(accepted, tf.cast(new, old.dtype), old)
  return collections.OrderedDict(
      phi=[keep(n, o) for n, o in zip(phi, state['phi'])],
      optimizer_state=tf.nest.map_structure(keep, new_opt, state['optimizer_state']),
      episode=state['episode'] + 1)


META_UPDATES.add('client_adam', MetaUpdate(client_adam_client, client_adam_server))
META_UPDATES.add('server_adam', MetaUpdate(server_adam_client, server_adam_server))
