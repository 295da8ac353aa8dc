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


def cyclic_batch(x, y, batch_size, index):
  """NumPy reference of `learning.minibatch_stream`: batch `index` of the cyclic stream."""
  n = len(y)
  b = max(min(batch_size, n), 1)
  rows = (index * b + np.arange(b)) % n
  return x[rows], y[rows]


def loss_grad(weights, x, y):
  """Plain eager TF gradient of the test MLP's mean cross-entropy."""
  weights = [tf.convert_to_tensor(w) for w in weights]
  with tf.GradientTape() as tape:
    tape.watch(weights)
    loss = ce(mlp_logits(weights, x), y)
  return tape.gradient(loss, weights)


def perturbed(weights, seed, scale=0.1, offset=True):
  """`weights` plus seeded Gaussian noise (or, with offset=False, the noise alone)."""
  rng = np.random.default_rng(seed)
  noise = [scale * rng.standard_normal(np.shape(w)).astype(np.float32) for w in weights]
  return [np.asarray(w, np.float32) + n for w, n in zip(weights, noise)] if offset else noise


def reference_minibatch_sgd(weights, x, y, lr, epochs, batch_size, grad_fn=loss_grad):
  """Plain-TF reference of `local_training.train_minibatches` with SGD.

  Minibatches in order, the last one partial, `epochs` passes;
  `grad_fn(weights, batch_x, batch_y)` gives the gradients of one step.
  """
  weights = [tf.convert_to_tensor(w, tf.float32) for w in weights]
  for _ in range(epochs):
    for start in range(0, len(y), batch_size):
      grads = grad_fn(weights, x[start:start + batch_size], y[start:start + batch_size])
      weights = [w - lr * g for w, g in zip(weights, grads)]
  return [w.numpy() for w in weights]


def assert_query_loss(result, weights, client, rtol=1e-5):
  """An evaluation result's `loss_sum` is the plain-TF query loss of the MLP `weights`."""
  expected = ce(mlp_logits(weights, client.query.x), client.query.y).numpy()
  np.testing.assert_allclose(result['loss_sum'], expected * len(client.query.y), rtol=rtol)


def check_states_follow_clients(proc, client_datas):
  """Two rounds of a stateful process; each client gets back its own state, in order.

  Round 1 starts every client from `initial_client_state`; round 2 passes the
  states and data in reverse order. Each returned state must equal what
  `proc.client_update` gives that client alone, so no state is mixed up or
  shared. Returns the round-1 states (the caller checks they differ).
  """
  state = proc.initialize()
  rounds = [([proc.initial_client_state] * len(client_datas), list(client_datas))]
  for round_num in range(2):
    states, datas = rounds[-1]
    params = state['params']
    state, new_states, _ = proc.next(state, states, datas)
    for old, data, got in zip(states, datas, new_states):
      _, alone = proc.client_update(params, old, data)
      assert got['visits'] == old['visits'] + 1.0
      for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(alone)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if round_num == 0:
      first = new_states
      rounds.append((new_states[::-1], datas[::-1]))
  return first


def program_env():
  """The environment for running a program binary in a test subprocess."""
  import os  # pylint: disable=g-import-not-at-top
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1')


def parent_pid(pid):
  try:
    with open(f'/proc/{pid}/stat') as f:
      return int(f.read().rsplit(')', 1)[1].split()[1])
  except (FileNotFoundError, IndexError):
    return -1


def workers_of(pid):
  """PIDs of the TFF worker binaries whose parent is `pid`."""
  import subprocess  # pylint: disable=g-import-not-at-top
  out = subprocess.run(['pgrep', '-f', 'worker_binary'], capture_output=True, text=True).stdout
  return [int(p) for p in out.split() if parent_pid(int(p)) == pid]


def csv_rounds(path):
  """The `round` column of a metrics/eval CSV."""
  import csv  # pylint: disable=g-import-not-at-top
  with open(path, newline='') as f:
    return [int(r['round']) for r in csv.DictReader(f)]
