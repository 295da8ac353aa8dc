"""Local minibatch training with a `tff.learning.optimizers` optimizer.

Used by FedAvg's client work (McMahan et al. 2017; FedMeta Sec. 4.2), by
FedAvg(Meta)'s fine-tuning on the support set at evaluation, and, through the
`regularizer` hook, by every method whose local objective adds a term to the
cross-entropy: FedEC's KL constraint (FedEC Eq. 11), FedEC-l2, Ditto's and
FedProx's proximal terms, SCAFFOLD's control-variate correction.

With TFF's Adam (the `adam` of `algorithms.base.OPTIMIZERS`; `fused_adam`)
the loop keeps the weights in variables and steps them with TensorFlow's fused
Adam kernel; with any other optimizer, or in a graph that cannot hold
variables, it carries them as loop tensors through the optimizer's `next`.
Both compute the same minibatches, losses and update.
"""

from __future__ import annotations

import collections
from typing import Callable, Optional, Sequence

import tensorflow as tf

from tff_meta.learning import fused_adam, inner_loop, losses


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
  x, y = tf.nest.map_structure(tf.convert_to_tensor, (x, y))   # x may be a structure
  batches_per_epoch = (tf.shape(y)[0] + batch_size - 1) // batch_size
  steps = epochs * batches_per_epoch

  # A tf.while_loop over index ranges rather than `Dataset.reduce`: inside a
  # ReduceDataset, TFF's worker cannot run the gradient of a Keras RNN (the
  # LSTM's forward function asks for the Keras input placeholder).
  def minibatch(i, w):
    """(dense gradients, batch statistics) of minibatch i at weights w."""
    start = (i % batches_per_epoch) * batch_size
    bx, by = tf.nest.map_structure(lambda t: t[start:start + batch_size], (x, y))
    with tf.GradientTape() as tape:
      tape.watch(w)
      logits = logits_fn(list(w), bx)
      loss = losses.cross_entropy(logits, by)
      if regularizer is not None:
        loss = loss + regularizer(list(w), bx, logits)
    return inner_loop.dense(tape.gradient(loss, w)), losses.batch_stats(logits, by)

  if fused_adam.can_apply_in_place(optimizer):
    adam = fused_adam.InPlaceAdam(optimizer, weights)
    with tf.control_dependencies(adam.init_ops):
      first = tf.constant(0)

    def in_place_step(i, stats):
      grads, batch = minibatch(i, adam.read(after=i))
      with tf.control_dependencies(adam.apply(i + 1, grads)):
        return i + 1, add_stats(stats, batch)

    last, stats = tf.while_loop(lambda i, _: i < steps, in_place_step, (first, zero_stats()))
    return adam.read(after=last), stats

  opt_state = optimizer.initialize(tuple(tf.TensorSpec(w.shape, w.dtype) for w in weights))

  def step(i, w, state, stats):
    grads, batch = minibatch(i, w)
    state, w = optimizer.next(state, w, tuple(grads))
    return i + 1, tuple(w), state, add_stats(stats, batch)

  _, weights, _, stats = tf.while_loop(lambda i, *_: i < steps, step,
                                       (tf.constant(0), weights, opt_state, zero_stats()))
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
