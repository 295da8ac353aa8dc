"""Small real data and plain-TF references shared by the tests."""

import collections

import numpy as np
import tensorflow as tf

from tff_meta.data import load_dataset, protocol
from tff_meta.models import build_model_spec


def digits_protocol(support_fraction=0.3, seed=0, num_clients=50):
  ds = load_dataset('digits', num_clients=num_clients, labels_per_client=2, seed=seed)
  return protocol.prepare(ds, support_fraction=support_fraction, seed=seed)


def mlp_spec(hidden=16, seed=0):
  return build_model_spec('mlp', (8, 8), 10, seed=seed, hidden_units=(hidden,))


def episode(client):
  return collections.OrderedDict(
      support_x=client.support.x, support_y=client.support.y,
      query_x=client.query.x, query_y=client.query.y)


def mlp_logits(weights, x):
  """Plain-TF forward of the test MLP (independent of Keras and TFF)."""
  w1, b1, w2, b2 = weights
  h = tf.nn.relu(tf.matmul(tf.reshape(x, [tf.shape(x)[0], -1]), w1) + b1)
  return tf.matmul(h, w2) + b2


def ce(logits, y):
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def reference_meta_gradient(weights, ep, alpha, steps=1, first_order=False, rates=None):
  """Plain eager TF MAML / Meta-SGD meta-gradient with nested tapes.

  Returns (grad wrt weights, grad wrt rates or None).
  """
  theta = [tf.Variable(w, dtype=tf.float32) for w in weights]
  alphas = [tf.Variable(r, dtype=tf.float32) for r in rates] if rates is not None else None
  with tf.GradientTape(persistent=True) as outer:
    current = [tf.identity(t) for t in theta]
    for _ in range(steps):
      with tf.GradientTape() as inner:
        inner.watch(current)
        loss = ce(mlp_logits(current, ep['support_x']), ep['support_y'])
      g = inner.gradient(loss, current)
      if first_order:
        g = [tf.stop_gradient(x) for x in g]
      if alphas is None:
        current = [c - alpha * gi for c, gi in zip(current, g)]
      else:
        current = [c - a * gi for c, a, gi in zip(current, alphas, g)]
    q = ce(mlp_logits(current, ep['query_x']), ep['query_y'])
  gw = [x.numpy() for x in outer.gradient(q, theta)]
  ga = [x.numpy() for x in outer.gradient(q, alphas)] if alphas is not None else None
  return gw, ga


def assert_rel_close(actual, expected, rtol=1e-5, atol=1e-7):
  for a, e in zip(actual, expected):
    a, e = np.asarray(a), np.asarray(e)
    err = np.max(np.abs(a - e)) / max(np.max(np.abs(e)), atol)
    assert err <= rtol, f'relative error {err:.2e} > {rtol}'
