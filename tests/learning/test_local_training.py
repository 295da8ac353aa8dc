"""The small shared pieces of local training: stats sums, per-epoch means, the pseudo-gradient."""

import numpy as np
import tensorflow as tf

from tff_meta.learning import local_training, losses


def test_stats_sum_batch_by_batch_and_divide_by_epochs():
  logits = tf.constant([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
  labels = tf.constant([0, 0, 0])
  one = losses.batch_stats(logits, labels)
  total = local_training.add_stats(local_training.add_stats(local_training.zero_stats(), one), one)
  assert list(total) == ['loss_sum', 'correct', 'num_examples']
  np.testing.assert_allclose(total['num_examples'], 6.0)
  np.testing.assert_allclose(total['correct'], 4.0)   # rows 1 and 3 right, twice
  mean = local_training.per_epoch(total, 2)
  np.testing.assert_allclose([mean[k] for k in mean], [one[k] for k in one], rtol=1e-6)


def test_pseudo_gradient_is_start_minus_trained():
  start = [tf.constant([1.0, 2.0]), tf.constant(3.0)]
  trained = [tf.constant([0.5, 2.5]), tf.constant(1.0)]
  delta = local_training.pseudo_gradient(start, trained)
  np.testing.assert_allclose(delta[0], [0.5, -0.5])
  np.testing.assert_allclose(delta[1], 2.0)
