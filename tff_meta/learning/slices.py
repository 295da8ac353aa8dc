"""Full-batch sums and gradients computed slice by slice: the math of the whole set, the
memory of one slice.

Personalized evaluation (FedMeta Sec. 4.1, Alg. 1 l. 13) adapts each client
with full-batch steps on its whole support set and scores its whole query set.
A Shakespeare role holds up to tens of thousands of 80-character sequences,
and an LSTM's activations over all of them at once do not fit in memory. Both
quantities are sums over examples, so they can be accumulated over fixed-size
slices in a `tf.while_loop`, which keeps one slice's activations alive:

- `stats`: loss_sum, correct and num_examples of the query set, summed over
  slices (`losses.batch_stats` of the whole set);
- `mean_gradient`: the gradient of the mean loss over the whole set,
  grad (1/N) sum_i l_i = sum_k (n_k / N) grad L_k, with L_k the mean loss of
  slice k of n_k examples: exact up to float rounding. The result is a
  constant (first-order adaptation: nothing differentiates through it).

The slices are consecutive rows x[k s : (k + 1) s]; the last one may be
shorter; a set with fewer rows than one slice is a single slice.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import tensorflow as tf

from tff_meta.learning import adaptation

# Rows per slice. The character LSTM keeps about 1.6 MB of activations per
# sequence for a gradient, so a slice of 128 holds about 0.2 GB.
SLICE_SIZE = 128


def _rows(x, y, start, size):
  return tf.nest.map_structure(lambda t: t[start:start + size], (x, y))


def _num_slices(y, size: Optional[int]):
  """(rows per slice, N, number of slices); `size` None = SLICE_SIZE, read when the
  graph is built."""
  size = SLICE_SIZE if size is None else size
  if size < 1:
    raise ValueError(f'slice size must be >= 1, got {size}.')
  n = tf.shape(y)[0]
  return size, n, (n + size - 1) // size


def stats(stats_fn: Callable, x, y, size: Optional[int] = None):
  """Sum over slices of `stats_fn(x_k, y_k)`, a structure of scalars that add up over
  examples (e.g. `losses.batch_stats`); an empty set is one empty slice."""
  x, y = tf.nest.map_structure(tf.convert_to_tensor, (x, y))
  size, _, count = _num_slices(y, size)

  def body(k, total):
    part = stats_fn(*_rows(x, y, k * size, size))
    return k + 1, tf.nest.map_structure(tf.add, total, part)

  first = stats_fn(*_rows(x, y, 0, size))
  _, total = tf.while_loop(lambda k, _: k < count, body, (tf.constant(1), first))
  return total


def mean_gradient(loss_fn: Callable, weights: Sequence[tf.Tensor], x, y,
                  size: Optional[int] = None, regularizer: Optional[Callable] = None):
  """grad_w of [(1/N) sum_i l_i(w) + regularizer(w)], as constants, one slice at a time.

  Args:
    loss_fn: (weights, x_k, y_k) -> mean loss of a slice.
    weights: the point w (tensors).
    x, y: the whole set (x may be a structure); N = len(y). An empty set adds 0.
    size: rows per slice (None = SLICE_SIZE).
    regularizer: optional data-free term, weights -> scalar (e.g. pFedMe's
      proximal term), differentiated once outside the loop.
  """
  weights = [tf.convert_to_tensor(w) for w in weights]
  x, y = tf.nest.map_structure(tf.convert_to_tensor, (x, y))
  size, n, count = _num_slices(y, size)

  def body(k, total):
    xs, ys = _rows(x, y, k * size, size)
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = loss_fn(weights, xs, ys)
    rows = tf.cast(tf.shape(ys)[0], loss.dtype)
    grads = adaptation.dense(tape.gradient(loss, weights))
    return k + 1, [t + rows * g for t, g in zip(total, grads)]

  zeros = [tf.zeros_like(w) for w in weights]
  _, total = tf.while_loop(lambda k, _: k < count, body, (tf.constant(0), zeros))
  scale = 1.0 / tf.cast(tf.maximum(n, 1), total[0].dtype)
  grads = [tf.stop_gradient(t * scale) for t in total]
  if regularizer is not None:
    with tf.GradientTape() as tape:
      tape.watch(weights)
      extra = regularizer(weights)
    grads = [g + tf.stop_gradient(e)
             for g, e in zip(grads, adaptation.dense(tape.gradient(extra, weights)))]
  return grads
