"""tff_meta/learning/finite.py: the one non-finite check."""

import numpy as np
import tensorflow as tf

from tff_meta.learning.finite import all_finite


def test_all_finite_looks_at_every_tensor():
  ok = {'w': [tf.ones([2, 3]), tf.zeros([3])], 'b': tf.constant(1.0)}
  assert bool(all_finite(ok))
  for bad in (np.nan, np.inf, -np.inf):
    broken = {'w': [tf.ones([2, 3]), tf.constant([0.0, bad, 0.0])], 'b': tf.constant(1.0)}
    assert not bool(all_finite(broken))
