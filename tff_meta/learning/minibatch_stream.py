"""A fixed number of local steps, each on its own fresh minibatch(es).

Per-FedAvg (Fallah et al. 2020, Alg. 1) takes tau local steps, step t on
independent batches D_t, D'_t (and D''_t for the Hessian-free variant);
pFedMe (T. Dinh et al. 2020, Alg. 1) takes R local steps, step r on a batch
D_i. Both count steps, not epochs. This stream cuts the client's data (already
shuffled per round with a seed by the program, so everything is
deterministic) into consecutive minibatches, wrapping around to the start when
the data run out, and hands out `group_size` consecutive batches per step.

A client with fewer examples than `batch_size` uses batches of all its
examples; a client with no examples yields no steps.
"""

from __future__ import annotations

import tensorflow as tf


def batch_groups(x: tf.Tensor, y: tf.Tensor, batch_size: int, group_size: int,
                 num_groups: int) -> tf.data.Dataset:
  """`num_groups` elements `(xs, ys)` of shape `[group_size, b, ...]`, `[group_size, b]`.

  Group t holds batches group_size*t ... group_size*t + group_size - 1 of the
  cyclic stream x[0], x[1], ..., x[n-1], x[0], ... cut into batches of
  b = min(batch_size, n).
  """
  if batch_size < 1 or group_size < 1 or num_groups < 1:
    raise ValueError(f'batch_size, group_size and num_groups must be >= 1, got '
                     f'{batch_size}, {group_size}, {num_groups}.')
  n = tf.shape(y, out_type=tf.int64)[0]
  b = tf.maximum(tf.minimum(tf.constant(batch_size, tf.int64), n), 1)
  return (tf.data.Dataset.from_tensor_slices((x, y)).repeat()
          .batch(b, drop_remainder=True).batch(group_size, drop_remainder=True)
          .take(num_groups))
