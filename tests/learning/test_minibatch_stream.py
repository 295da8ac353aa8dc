"""The cyclic minibatch stream of Per-FedAvg and pFedMe against a NumPy reference."""

import numpy as np
import pytest

from tests import helpers
from tff_meta.learning import minibatch_stream


@pytest.mark.parametrize('n,batch_size,group', [(7, 3, 3), (2, 5, 2), (6, 2, 1)])
def test_groups_are_consecutive_batches_of_the_cyclic_stream(n, batch_size, group):
  x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
  y = np.arange(n, dtype=np.int32)
  groups = list(minibatch_stream.batch_groups(x, y, batch_size, group, 4).as_numpy_iterator())
  assert len(groups) == 4
  for t, (xs, ys) in enumerate(groups):
    for j in range(group):
      ex, ey = helpers.cyclic_batch(x, y, batch_size, group * t + j)
      np.testing.assert_array_equal(xs[j], ex)
      np.testing.assert_array_equal(ys[j], ey)


def test_empty_client_gives_no_steps():
  x, y = np.zeros([0, 2], np.float32), np.zeros([0], np.int32)
  assert list(minibatch_stream.batch_groups(x, y, 4, 2, 3).as_numpy_iterator()) == []


def test_bad_sizes():
  with pytest.raises(ValueError, match='num_groups must be >= 1'):
    minibatch_stream.batch_groups(np.zeros([3, 2]), np.zeros([3], np.int32), 2, 1, 0)
