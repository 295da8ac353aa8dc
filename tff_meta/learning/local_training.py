"""Local minibatch training with a `tff.learning.optimizers` optimizer.

Used by FedAvg's client work (McMahan et al. 2017; FedMeta Sec. 4.2), by
FedAvg(Meta)'s fine-tuning on the support set at evaluation, and, through the
`regularizer` hook, by every method whose local objective adds a term to the
cross-entropy: FedEC's KL constraint (FedEC Eq. 11), FedEC-l2, Ditto's and
FedProx's proximal terms, SCAFFOLD's control-variate correction.
"""

from __future__ import annotations

import collections
from typing import Callable, Optional, Sequence

import tensorflow as tf

from tff_meta.learning import adaptation, losses


def train_minibatches(logits_fn: Callable, weights: Sequence[tf.Tensor], x: tf.Tensor,
                      y: tf.Tensor, optimizer, epochs: int, batch_size: int,
                      regularizer: Optional[Callable] = None):
  """Trains `weights` on (x, y) for `epochs` passes in order, minibatch by minibatch.

  The data arrive already shuffled (the program shuffles each client's data per
  round with a seed), so the computation is deterministic.

  Args:
    regularizer: optional `(weights, batch_x, logits) -> scalar` added to each
      minibatch's mean cross-entropy.

  Returns:
    (trained weights, OrderedDict of summed training statistics).
  """
  weights = tuple(tf.identity(w) for w in weights)
  specs = tuple(tf.TensorSpec(w.shape, w.dtype) for w in weights)
  opt_state = optimizer.initialize(specs)
  x, y = tf.nest.map_structure(tf.convert_to_tensor, (x, y))   # x may be a structure
  n = tf.shape(y)[0]
  batches_per_epoch = (n + batch_size - 1) // batch_size
  stats = zero_stats()

  # A tf.while_loop over index ranges rather than `Dataset.reduce`: inside a
  # ReduceDataset, TFF's worker cannot run the gradient of a Keras RNN (the
  # LSTM's forward function asks for the Keras input placeholder).
  def step(i, w, state, stats):
    start = (i % batches_per_epoch) * batch_size
    bx, by = tf.nest.map_structure(lambda t: t[start:start + batch_size], (x, y))
    with tf.GradientTape() as tape:
      tape.watch(w)
      logits = logits_fn(list(w), bx)
      loss = losses.cross_entropy(logits, by)
      if regularizer is not None:
        loss = loss + regularizer(list(w), bx, logits)
    grads = adaptation.dense(tape.gradient(loss, w))
    state, w = optimizer.next(state, w, tuple(grads))
    stats = add_stats(stats, losses.batch_stats(logits, by))
    return i + 1, tuple(w), state, stats

  _, weights, _, stats = tf.while_loop(lambda i, *_: i < epochs * batches_per_epoch, step,
                                       (tf.constant(0), weights, opt_state, stats))
  return list(weights), stats


def zero_stats() -> collections.OrderedDict:
  """Training sums before the first batch: loss_sum, correct, num_examples (`losses.batch_stats`)."""
  zero = tf.constant(0.0)
  return collections.OrderedDict(loss_sum=zero, correct=zero, num_examples=zero)


def add_stats(total, batch) -> collections.OrderedDict:
  """`total` plus one batch's `losses.batch_stats`, key by key."""
  return collections.OrderedDict((k, total[k] + batch[k]) for k in total)


def per_epoch(stats, epochs: int) -> collections.OrderedDict:
  """Training sums of `epochs` passes divided by `epochs`, so `num_examples` is the
  client's size (as FedAvg reports it)."""
  return collections.OrderedDict((k, v / float(epochs)) for k, v in stats.items())


def pseudo_gradient(start: Sequence[tf.Tensor], trained: Sequence[tf.Tensor]) -> list:
  """start - trained per tensor: the update a client sends after local training
  (FedAvg's theta - theta_local, Reptile's phi - theta), which the server's
  optimizer applies like a gradient."""
  return [w - t for w, t in zip(start, trained)]
