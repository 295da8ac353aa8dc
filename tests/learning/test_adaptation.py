"""The shared inner loop: hand-computed steps and second-order gradients vs finite differences."""

import numpy as np
import tensorflow as tf

from tff_meta.learning import adaptation


def test_sgd_steps_on_quadratic_by_hand():
  # L(w) = 0.5 * ||w - c||^2 has gradient w - c: w1 = w0 - a (w0 - c).
  c = tf.constant([1.0, -2.0])
  loss = lambda w: 0.5 * tf.reduce_sum(tf.square(w[0] - c))
  w = adaptation.sgd_adapt(loss, [tf.constant([3.0, 0.0])], 0.25, steps=2)
  # step 1: [3,0] - 0.25*[2,2] = [2.5,-0.5]; step 2: - 0.25*[1.5,1.5] = [2.125,-0.875]
  np.testing.assert_allclose(w[0].numpy(), [2.125, -0.875])


def test_per_parameter_rates():
  loss = lambda w: tf.reduce_sum(w[0]) + 2.0 * tf.reduce_sum(w[1])
  w = adaptation.sgd_adapt(loss, [tf.zeros([2]), tf.zeros([1])],
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
  adapted = adaptation.sgd_adapt(lambda w_: ce(w_, sx, sy), [w], alpha, steps, first_order)
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
