"""A client's inner loop: SGD adaptation, full-batch gradients in slices, the finiteness check.

**Adaptation** (`sgd_adapt`, `descend`): theta' = theta - alpha o grad L_support(theta),
repeated. One function serves MAML (scalar alpha), Meta-SGD (per-parameter alpha, FedMeta
Eq. 3, arXiv:1802.07876), first-order MAML (inner gradient as a constant) and fine-tuning at
evaluation. The steps are unrolled in Python: second-order gradients through a
`tf.while_loop` can silently come back `None` (TFF_NOTES).

**Slices** (`sliced_stats`, `mean_gradient`, `mean_hessian_product`): full-batch sums and
gradients computed slice by slice, the math of the whole set with the memory of one slice.
Personalized evaluation (FedMeta Sec. 4.1, Alg. 1 l. 13) adapts each client with full-batch
steps on its whole support set and scores its whole query set. A Shakespeare role holds up
to tens of thousands of 80-character sequences, and an LSTM's activations over all of them
at once do not fit in memory. Both quantities are sums over examples, so they are
accumulated over fixed-size slices in a `tf.while_loop`, which keeps one slice's
activations alive (with `parallel_iterations=1`: the slices do not depend on each other, so
the default 10 would run up to 10 slices' forward and backward passes at once):

- `sliced_stats`: loss_sum, correct and num_examples of the query set, summed over slices
  (`losses.batch_stats` of the whole set);
- `mean_gradient`: the gradient of the mean loss over the whole set,
  grad (1/N) sum_i l_i = sum_k (n_k / N) grad L_k, with L_k the mean loss of slice k of
  n_k examples: exact up to float rounding. The result is a constant (first-order
  adaptation: nothing differentiates through it).

The slices are consecutive rows x[k s : (k + 1) s]; the last one may be shorter; a set with
fewer rows than one slice is a single slice.

**Finiteness** (`all_finite`): the one non-finite check. Client updates
(`algorithms/process.py`), few-round meta-updates (`fewround/meta_update.py`,
`fewround/process.py`) and one-shot scores (`fewround/oneshot.py`) reject or rank by it.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Union

import tensorflow as tf

Weights = List[tf.Tensor]
Rates = Union[float, tf.Tensor, Sequence[tf.Tensor]]


def dense(grads):
  """Gradients as dense tensors (embedding lookups give `tf.IndexedSlices`)."""
  return [None if g is None else tf.convert_to_tensor(g) for g in grads]


def sgd_adapt(loss_fn: Callable[[Weights], tf.Tensor], weights: Sequence[tf.Tensor],
              rates: Rates, steps: int, first_order: bool = False) -> Weights:
  """Returns the weights after `steps` SGD steps on `loss_fn`.

  Args:
    loss_fn: weights -> scalar support loss.
    weights: the starting weights theta (tensors; gradients flow through them).
    rates: alpha, a scalar or one tensor per weight (Meta-SGD's alpha vector).
    steps: number of unrolled inner steps (>= 0).
    first_order: treat the inner gradients as constants (FOMAML).
  """

  def gradient(weights):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = loss_fn(weights)
    grads = dense(tape.gradient(loss, weights))
    return [tf.stop_gradient(g) for g in grads] if first_order else grads

  return descend(gradient, weights, rates, steps)


def descend(gradient: Callable[[Weights], Weights], weights: Sequence[tf.Tensor], rates: Rates,
            steps: int) -> Weights:
  """`steps` steps w <- w - alpha o gradient(w) (see `sgd_adapt`); `gradient` may be any
  function of the weights, e.g. `inner_loop.mean_gradient` over a large support set."""
  if steps < 0:
    raise ValueError(f'inner steps must be >= 0, got {steps}.')
  weights = list(weights)
  per_weight = isinstance(rates, (list, tuple))
  for _ in range(steps):
    grads = gradient(weights)
    if per_weight:
      weights = [w - a * g for w, a, g in zip(weights, rates, grads)]
    else:
      weights = [w - rates * g for w, g in zip(weights, grads)]
  return weights


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


def sliced_stats(stats_fn: Callable, x, y, size: Optional[int] = None):
  """Sum over slices of `stats_fn(x_k, y_k)`, a structure of scalars that add up over
  examples (e.g. `losses.batch_stats`); an empty set is one empty slice."""
  x, y = tf.nest.map_structure(tf.convert_to_tensor, (x, y))
  size, _, count = _num_slices(y, size)

  def body(k, total):
    part = stats_fn(*_rows(x, y, k * size, size))
    return k + 1, tf.nest.map_structure(tf.add, total, part)

  first = stats_fn(*_rows(x, y, 0, size))
  _, total = tf.while_loop(lambda k, _: k < count, body, (tf.constant(1), first),
                           parallel_iterations=1)
  return total


def _slice_means(slice_fn: Callable, x, y, size: Optional[int], zeros, sums=None):
  """(sum_k (n_k / N) slice_fn(x_k, y_k)[0], sum_k slice_fn(x_k, y_k)[1]): the mean over the
  whole set of per-slice means (a list of tensors like `zeros`), and plain sums of
  `sums`-like extras (e.g. `losses.batch_stats`); zeros for an empty set."""
  x, y = tf.nest.map_structure(tf.convert_to_tensor, (x, y))
  size, n, count = _num_slices(y, size)

  def body(k, total, extra):
    xs, ys = _rows(x, y, k * size, size)
    means, part = slice_fn(xs, ys)
    rows = tf.cast(tf.shape(ys)[0], means[0].dtype)
    return (k + 1, [t + rows * m for t, m in zip(total, means)],
            tf.nest.map_structure(tf.add, extra, part))

  _, total, extra = tf.while_loop(lambda k, *_: k < count, body,
                                  (tf.constant(0), list(zeros), sums if sums is not None else ()),
                                  parallel_iterations=1)
  scale = 1.0 / tf.cast(tf.maximum(n, 1), total[0].dtype)
  return [tf.stop_gradient(t * scale) for t in total], extra


def mean_gradient(loss_fn: Callable, weights: Sequence[tf.Tensor], x, y,
                  size: Optional[int] = None, regularizer: Optional[Callable] = None,
                  stats_fn: Optional[Callable] = None):
  """grad_w of [(1/N) sum_i l_i(w) + regularizer(w)], as constants, one slice at a time.

  Args:
    loss_fn: (weights, x_k, y_k) -> mean loss of a slice; with `stats_fn`,
      (weights, x_k, y_k) -> (mean loss, outputs).
    weights: the point w (tensors).
    x, y: the whole set (x may be a structure); N = len(y). An empty set adds 0.
    size: rows per slice (None = SLICE_SIZE).
    regularizer: optional data-free term, weights -> scalar (e.g. pFedMe's
      proximal term), differentiated once outside the loop.
    stats_fn: optional (outputs, y_k) -> sums over the slice's examples (e.g.
      `losses.batch_stats`); then returns (gradients, the sums over the set).
  """
  weights = [tf.convert_to_tensor(w) for w in weights]
  zeros = [tf.zeros_like(w) for w in weights]

  def slice_fn(xs, ys):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      out = loss_fn(weights, xs, ys)
    loss, part = (out[0], stats_fn(out[1], ys)) if stats_fn is not None else (out, ())
    return dense(tape.gradient(loss, weights)), part

  sums = None
  if stats_fn is not None:   # the structure of the sums, from an empty slice's
    _, empty = slice_fn(*_rows(x, y, 0, 0))
    sums = tf.nest.map_structure(tf.zeros_like, empty)
  grads, totals = _slice_means(slice_fn, x, y, size, zeros, sums)
  if regularizer is not None:
    with tf.GradientTape() as tape:
      tape.watch(weights)
      extra = regularizer(weights)
    grads = [g + tf.stop_gradient(e)
             for g, e in zip(grads, dense(tape.gradient(extra, weights)))]
  return (grads, totals) if stats_fn is not None else grads


def mean_hessian_product(loss_fn: Callable, weights: Sequence[tf.Tensor], vector, x, y,
                         size: Optional[int] = None):
  """H v, H the Hessian in w of the mean loss (1/N) sum_i l_i(w), v = `vector` (one tensor
  per weight), as constants: sum_k (n_k / N) grad_w <grad_w L_k(w), v>, one slice at a time.
  `loss_fn` is (weights, x_k, y_k) -> mean loss of a slice."""
  weights = [tf.convert_to_tensor(w) for w in weights]
  vector = [tf.stop_gradient(tf.convert_to_tensor(v)) for v in vector]

  def slice_fn(xs, ys):
    with tf.GradientTape() as outer:
      outer.watch(weights)
      with tf.GradientTape() as inner:
        inner.watch(weights)
        loss = loss_fn(weights, xs, ys)
      grads = dense(inner.gradient(loss, weights))
      dot = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, vector)])
    products = outer.gradient(dot, weights, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return dense(products), ()

  return _slice_means(slice_fn, x, y, size, [tf.zeros_like(w) for w in weights])[0]


def all_finite(structure) -> tf.Tensor:
  """A scalar bool tensor: no NaN or Inf in any tensor of `structure`."""
  return tf.reduce_all(tf.stack(
      [tf.reduce_all(tf.math.is_finite(t)) for t in tf.nest.flatten(structure)]))
