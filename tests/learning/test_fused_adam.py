"""learning/fused_adam.py: the client loop's in-place fused Adam against TFF's Adam and by hand."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms import base
from tff_meta.learning import fused_adam, local_training

RNG = np.random.default_rng(0)
X = RNG.normal(size=(23, 4)).astype(np.float32)   # 3 minibatches of 10, the last of 3
Y = RNG.integers(0, 3, 23).astype(np.int32)
W0 = [RNG.normal(size=(4, 3)).astype(np.float32), RNG.normal(size=(3,)).astype(np.float32)]


class _Functional(tff.learning.optimizers.Optimizer):
  """TFF's Adam behind another class: the local loop's functional path, for reference."""

  def __init__(self, learning_rate):
    self._adam = tff.learning.optimizers.build_adam(learning_rate)

  def initialize(self, specs):
    return self._adam.initialize(specs)

  def next(self, state, weights, gradients):
    return self._adam.next(state, weights, gradients)

  def get_hparams(self, state):
    return self._adam.get_hparams(state)

  def set_hparams(self, state, hparams):
    return self._adam.set_hparams(state, hparams)


def _logits(w, x):
  return tf.matmul(x, w[0]) + w[1]


def _in_graph(optimizer, epochs=2, x=X, y=Y, regularizer=None):
  """train_minibatches in a plain graph (as TFF builds a client computation), run once."""
  graph = tf.Graph()
  with graph.as_default():
    out = local_training.train_minibatches(_logits, [tf.constant(w) for w in W0], x, y, optimizer,
                                           epochs, 10, regularizer=regularizer)
    uses_variables = bool(graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES))
  with tf.compat.v1.Session(graph=graph) as session:
    weights, stats = session.run(out)
  return weights, stats, uses_variables


def _numpy_adam(lr, epochs, b1=0.9, b2=0.999, eps=1e-7):
  """Kingma & Ba Alg. 1 in TFF's form, with the softmax cross-entropy gradient by hand."""
  w = [a.astype(np.float64) for a in W0]
  m = [np.zeros_like(a) for a in w]
  v = [np.zeros_like(a) for a in w]
  t = 0
  for _ in range(epochs):
    for start in range(0, len(Y), 10):
      x, y = X[start:start + 10].astype(np.float64), Y[start:start + 10]
      z = x @ w[0] + w[1]
      p = np.exp(z - z.max(1, keepdims=True))
      p /= p.sum(1, keepdims=True)
      p[np.arange(len(y)), y] -= 1
      p /= len(y)
      grads = [x.T @ p, p.sum(0)]
      t += 1
      lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
      for k, g in enumerate(grads):
        m[k] += (g - m[k]) * (1 - b1)
        v[k] += (g * g - v[k]) * (1 - b2)
        w[k] -= lr_t * m[k] / (np.sqrt(v[k]) + eps)
  return w


def test_the_registry_adam_runs_in_place_and_equals_tff_adam():
  fused, fused_stats, in_place = _in_graph(base.build_optimizer('adam', 0.05))
  plain, plain_stats, functional_vars = _in_graph(_Functional(0.05))
  assert in_place and not functional_vars
  for a, b in zip(fused, plain):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for k in plain_stats:
    np.testing.assert_allclose(fused_stats[k], plain_stats[k], rtol=1e-5)
  assert fused_stats['num_examples'] == 2 * len(Y)
  assert max(np.abs(a - w).max() for a, w in zip(fused, W0)) > 0.1   # it did train


def test_in_place_adam_equals_adam_by_hand():
  fused, _, _ = _in_graph(tff.learning.optimizers.build_adam(0.05), epochs=3)
  for a, b in zip(fused, _numpy_adam(0.05, 3)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_regularizer_and_no_data_in_place():
  pull = lambda w, bx, logits: 0.5 * tf.reduce_sum(tf.square(w[0]))
  fused, _, _ = _in_graph(tff.learning.optimizers.build_adam(0.05), regularizer=pull)
  plain, _, _ = _in_graph(_Functional(0.05), regularizer=pull)
  for a, b in zip(fused, plain):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  untouched, stats, _ = _in_graph(tff.learning.optimizers.build_adam(0.05), x=X[:0], y=Y[:0])
  for a, w in zip(untouched, W0):
    np.testing.assert_array_equal(a, w)
  assert stats['num_examples'] == 0


@pytest.mark.slow
def test_a_function_graph_gets_the_functional_loop():
  optimizer = tff.learning.optimizers.build_adam(0.05)

  @tf.function
  def train():
    assert not fused_adam.can_apply_in_place(optimizer)
    return local_training.train_minibatches(_logits, [tf.constant(w) for w in W0], X, Y,
                                            optimizer, 2, 10)[0]
  plain, _, _ = _in_graph(_Functional(0.05))
  for a, b in zip(train(), plain):
    np.testing.assert_array_equal(a.numpy(), b)


def test_the_in_place_step_reads_the_optimizers_hparams():
  """TFF's Adam with its own beta_1 and epsilon: the fused step takes them (`get_hparams`)."""
  optimizer = tff.learning.optimizers.build_adam(0.05, beta_1=0.8, epsilon=1e-3)
  fused, _, in_place = _in_graph(optimizer, epochs=3)
  assert in_place and not fused_adam.can_apply_in_place(_Functional(0.05))
  for a, b in zip(fused, _numpy_adam(0.05, 3, b1=0.8, eps=1e-3)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_in_place_inside_a_tff_computation_on_the_worker(tff_context):
  specs = [tf.TensorSpec(w.shape, tf.float32) for w in W0]

  def client(optimizer):
    @tff.tensorflow.computation(specs, tf.TensorSpec([None, 4], tf.float32),
                                tf.TensorSpec([None], tf.int32))
    def train(w, x, y):
      return local_training.train_minibatches(_logits, w, x, y, optimizer, 2, 10)[0]
    return train

  fused_client = client(tff.learning.optimizers.build_adam(0.05))
  fused = fused_client(W0, X, Y)
  again = fused_client(W0, X, Y)   # nothing kept between calls
  plain = client(_Functional(0.05))(W0, X, Y)
  for a, b, c in zip(fused, again, plain):
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
