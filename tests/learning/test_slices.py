"""Sums and gradients slice by slice equal the full-batch ones (plain TF references)."""

import numpy as np
import pytest
import tensorflow as tf

from tff_meta.learning import losses, slices


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
  fn = lambda: slices.stats(lambda xs, ys: losses.batch_stats(_logits(w, xs), ys), x, y, size)
  got = tf.function(fn)() if graph else fn()
  want = losses.batch_stats(_logits(w, x), y)
  assert float(got['num_examples']) == n
  assert float(got['correct']) == float(want['correct'])
  np.testing.assert_allclose(float(got['loss_sum']), float(want['loss_sum']), rtol=1e-6)


def test_stats_of_an_empty_set_are_zero():
  x, y, w = _problem(0)
  got = slices.stats(lambda xs, ys: losses.batch_stats(_logits(w, xs), ys), x, y, 3)
  assert [float(v) for v in got.values()] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize('graph', [False, True])
@pytest.mark.parametrize('n,size', CASES)
def test_mean_gradient_equals_the_full_batch_gradient(n, size, graph):
  x, y, w = _problem(n, seed=1)
  fn = lambda: slices.mean_gradient(_mean_loss, w, x, y, size)
  got = tf.function(fn)() if graph else fn()
  for g, want in zip(got, _full_gradient(w, x, y)):
    np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)


def test_unequal_slices_are_weighted_by_their_size():
  """Averaging the slices' mean gradients unweighted would be wrong: the check can tell."""
  x, y, w = _problem(10, seed=2)
  per_slice = [_full_gradient(w, x[i:i + 3], y[i:i + 3]) for i in range(0, 10, 3)]
  unweighted = [np.mean([g[j].numpy() for g in per_slice], axis=0) for j in range(3)]
  got = slices.mean_gradient(_mean_loss, w, x, y, 3)
  want = _full_gradient(w, x, y)
  assert np.max(np.abs(unweighted[0] - want[0].numpy())) > 1e-3
  np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5, atol=1e-7)


def test_regularizer_gradient_is_added_once():
  x, y, w = _problem(7, seed=3)
  anchor = [v + 0.5 for v in w]
  prox = lambda v: 0.5 * 2.0 * losses.squared_distance(v, anchor)
  got = slices.mean_gradient(_mean_loss, w, x, y, 3, regularizer=prox)
  for g, want in zip(got, _full_gradient(w, x, y, extra=prox)):
    np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)


def test_slice_size_must_be_positive():
  x, y, w = _problem(3)
  with pytest.raises(ValueError, match='slice size'):
    slices.mean_gradient(_mean_loss, w, x, y, 0)
