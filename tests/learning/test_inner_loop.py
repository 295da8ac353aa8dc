"""The shared inner loop (`learning/inner_loop.py`) against hand-computed and plain-TF references.

Adaptation: hand-computed steps and second-order gradients vs finite differences. Slices: sums
and gradients slice by slice equal the full-batch ones. Finiteness: the one non-finite check.
"""

import numpy as np
import pytest
import tensorflow as tf

from tff_meta.learning import inner_loop, losses
from tff_meta.learning.inner_loop import all_finite


def test_sgd_steps_on_quadratic_by_hand():
  # L(w) = 0.5 * ||w - c||^2 has gradient w - c: w1 = w0 - a (w0 - c).
  c = tf.constant([1.0, -2.0])
  loss = lambda w: 0.5 * tf.reduce_sum(tf.square(w[0] - c))
  w = inner_loop.sgd_adapt(loss, [tf.constant([3.0, 0.0])], 0.25, steps=2)
  # step 1: [3,0] - 0.25*[2,2] = [2.5,-0.5]; step 2: - 0.25*[1.5,1.5] = [2.125,-0.875]
  np.testing.assert_allclose(w[0].numpy(), [2.125, -0.875])


def test_per_parameter_rates():
  loss = lambda w: tf.reduce_sum(w[0]) + 2.0 * tf.reduce_sum(w[1])
  w = inner_loop.sgd_adapt(loss, [tf.zeros([2]), tf.zeros([1])],
                           [tf.constant([1.0, 2.0]), tf.constant([3.0])], steps=1)
  np.testing.assert_allclose(w[0].numpy(), [-1.0, -2.0])
  np.testing.assert_allclose(w[1].numpy(), [-6.0])


def _episode(seed=0, n=12, d=5, k=3):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d))
  y = rng.integers(0, k, n)
  return x[:6], y[:6], x[6:], y[6:], rng.normal(size=(d, k)) * 0.5


def _maml_objective(w, sx, sy, qx, qy, alpha, steps, first_order=False):
  ce = lambda w_, x, y: tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.matmul(x, w_[0])))
  adapted = inner_loop.sgd_adapt(lambda w_: ce(w_, sx, sy), [w], alpha, steps, first_order)
  return ce(adapted, qx, qy)


def test_second_order_gradient_matches_finite_differences_float64():
  sx, sy, qx, qy, w0 = _episode()
  alpha, steps = 0.8, 2
  w = tf.constant(w0, tf.float64)
  with tf.GradientTape() as tape:
    tape.watch(w)
    loss = _maml_objective(w, sx, sy, qx, qy, alpha, steps)
  analytic = tape.gradient(loss, w).numpy()
  with tf.GradientTape() as tape:
    tape.watch(w)
    loss_fo = _maml_objective(w, sx, sy, qx, qy, alpha, steps, first_order=True)
  first_order = tape.gradient(loss_fo, w).numpy()

  eps = 1e-6
  numeric = np.zeros_like(w0)
  for idx in np.ndindex(*w0.shape):
    plus, minus = w0.copy(), w0.copy()
    plus[idx] += eps
    minus[idx] -= eps
    f = lambda v: _maml_objective(tf.constant(v), sx, sy, qx, qy, alpha, steps).numpy()
    numeric[idx] = (f(plus) - f(minus)) / (2 * eps)
  np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9)
  # The first-order gradient is measurably different: the check can tell them apart.
  assert np.max(np.abs(first_order - numeric)) > 100 * np.max(np.abs(analytic - numeric))
  assert np.max(np.abs(first_order - numeric)) > 1e-3


# Slices.

def _problem(n, seed=0, d=4, k=3):
  rng = np.random.default_rng(seed)
  x = tf.constant(rng.normal(size=(n, d)), tf.float32)
  y = tf.constant(rng.integers(0, k, n), tf.int32)
  w = [tf.constant(rng.normal(size=shape), tf.float32) for shape in ((d, 5), (5,), (5, k))]
  return x, y, w


def _logits(w, x):   # a small two-layer model, so the gradient is not linear in the data
  return tf.matmul(tf.tanh(tf.matmul(x, w[0]) + w[1]), w[2])


def _mean_loss(w, x, y):
  return losses.cross_entropy(_logits(w, x), y)


def _full_gradient(w, x, y, extra=None):
  with tf.GradientTape() as tape:
    tape.watch(w)
    loss = _mean_loss(w, x, y) + (extra(w) if extra is not None else 0.0)
  return tape.gradient(loss, w)


# 10 rows in slices of 3 (3, 3, 3, 1); 2 rows, fewer than one slice; one slice exactly.
CASES = [(10, 3), (2, 3), (4, 4)]


@pytest.mark.parametrize('graph', [False, True])
@pytest.mark.parametrize('n,size', CASES)
def test_stats_equal_the_full_batch(n, size, graph):
  x, y, w = _problem(n)
  fn = lambda: inner_loop.sliced_stats(lambda xs, ys: losses.batch_stats(_logits(w, xs), ys), x, y, size)
  got = tf.function(fn)() if graph else fn()
  want = losses.batch_stats(_logits(w, x), y)
  assert float(got['num_examples']) == n
  assert float(got['correct']) == float(want['correct'])
  np.testing.assert_allclose(float(got['loss_sum']), float(want['loss_sum']), rtol=1e-6)


def test_stats_of_an_empty_set_are_zero():
  x, y, w = _problem(0)
  got = inner_loop.sliced_stats(lambda xs, ys: losses.batch_stats(_logits(w, xs), ys), x, y, 3)
  assert [float(v) for v in got.values()] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize('graph', [False, True])
@pytest.mark.parametrize('n,size', CASES)
def test_mean_gradient_equals_the_full_batch_gradient(n, size, graph):
  x, y, w = _problem(n, seed=1)
  fn = lambda: inner_loop.mean_gradient(_mean_loss, w, x, y, size)
  got = tf.function(fn)() if graph else fn()
  for g, want in zip(got, _full_gradient(w, x, y)):
    np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)


def test_unequal_slices_are_weighted_by_their_size():
  """Averaging the slices' mean gradients unweighted would be wrong: the check can tell."""
  x, y, w = _problem(10, seed=2)
  per_slice = [_full_gradient(w, x[i:i + 3], y[i:i + 3]) for i in range(0, 10, 3)]
  unweighted = [np.mean([g[j].numpy() for g in per_slice], axis=0) for j in range(3)]
  got = inner_loop.mean_gradient(_mean_loss, w, x, y, 3)
  want = _full_gradient(w, x, y)
  assert np.max(np.abs(unweighted[0] - want[0].numpy())) > 1e-3
  np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5, atol=1e-7)


def test_regularizer_gradient_is_added_once():
  x, y, w = _problem(7, seed=3)
  anchor = [v + 0.5 for v in w]
  prox = lambda v: 0.5 * 2.0 * losses.squared_distance(v, anchor)
  got = inner_loop.mean_gradient(_mean_loss, w, x, y, 3, regularizer=prox)
  for g, want in zip(got, _full_gradient(w, x, y, extra=prox)):
    np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)


def test_slice_size_must_be_positive():
  x, y, w = _problem(3)
  with pytest.raises(ValueError, match='slice size'):
    inner_loop.mean_gradient(_mean_loss, w, x, y, 0)


def test_all_finite_looks_at_every_tensor():
  ok = {'w': [tf.ones([2, 3]), tf.zeros([3])], 'b': tf.constant(1.0)}
  assert bool(all_finite(ok))
  for bad in (np.nan, np.inf, -np.inf):
    broken = {'w': [tf.ones([2, 3]), tf.constant([0.0, bad, 0.0])], 'b': tf.constant(1.0)}
    assert not bool(all_finite(broken))
