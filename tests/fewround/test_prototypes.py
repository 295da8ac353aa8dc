"""Eq. 1-3 and the nearest-prototype rule against NumPy references."""

import numpy as np
import tensorflow as tf

from tff_meta.fewround import prototypes as pl


def np_log_softmax_loss(features, labels, protos, mask):
  """Per example: d(f, P^y) + log sum_{c' present} exp(-d(f, P^c'))."""
  out = []
  for f, y in zip(features, labels):
    d = ((f[None, :] - protos) ** 2).sum(-1)
    present = np.flatnonzero(mask > 0)
    out.append(d[y] + np.log(np.exp(-d[present]).sum()))
  return np.array(out)


def test_prototypes_are_class_means():
  rng = np.random.default_rng(0)
  f = rng.normal(size=(7, 3)).astype(np.float32)
  y = np.array([0, 2, 2, 0, 2, 0, 0], np.int32)
  protos, counts = pl.prototypes(tf.constant(f), tf.constant(y), 4)
  np.testing.assert_allclose(protos[0], f[y == 0].mean(0), rtol=1e-6)
  np.testing.assert_allclose(protos[2], f[y == 2].mean(0), rtol=1e-6)
  np.testing.assert_array_equal(protos[1], 0.0)
  np.testing.assert_array_equal(counts, [4, 0, 3, 0])


def test_prototype_loss_eq2_matches_numpy():
  rng = np.random.default_rng(1)
  f = rng.normal(size=(9, 4)).astype(np.float32)
  y = rng.integers(0, 3, 9).astype(np.int32)
  protos = rng.normal(size=(5, 4)).astype(np.float32)
  mask = np.array([1, 1, 1, 0, 0], np.float32)       # slots 3, 4 absent
  got = pl.prototype_loss(tf.constant(f), tf.constant(y), tf.constant(protos), tf.constant(mask))
  np.testing.assert_allclose(got, np_log_softmax_loss(f, y, protos, mask).mean(), rtol=1e-5)


def test_gpal_loss_eq3_sums_positions_and_matches_numpy():
  rng = np.random.default_rng(2)
  dense = rng.normal(size=(3, 2, 2, 4)).astype(np.float32)
  y = np.array([0, 1, 1], np.int32)
  protos = rng.normal(size=(3, 4)).astype(np.float32)
  mask = np.array([1, 1, 1], np.float32)
  expected = np.mean([
      np_log_softmax_loss(dense[b].reshape(4, 4), np.full(4, y[b]), protos, mask).sum()
      for b in range(3)])
  got = pl.gpal_loss(tf.constant(dense), tf.constant(y), tf.constant(protos), tf.constant(mask))
  np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_nearest_prototype_ignores_absent_classes():
  protos = np.array([[0., 0.], [10., 0.], [1., 1.]], np.float32)
  f = np.array([[0.9, 0.9], [9., 0.], [0.1, 0.]], np.float32)
  all_present = pl.nearest_prototype(tf.constant(f), tf.constant(protos), tf.ones([3]))
  np.testing.assert_array_equal(all_present, [2, 1, 0])
  without_2 = pl.nearest_prototype(tf.constant(f), tf.constant(protos),
                                   tf.constant([1., 1., 0.]))
  np.testing.assert_array_equal(without_2, [0, 1, 0])
