"""Losses and per-batch statistics on model outputs.

A `Loss` bundles the training loss, the per-batch sums that are aggregated
(`loss_sum`, `correct`, `num_examples`) and the label dtype, so one client
work serves classification (`CROSS_ENTROPY`, the default everywhere) and
rating regression (`SQUARED_ERROR`, Chen et al. 2018b Sec. 3.1).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable

import tensorflow as tf


def cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
  """Mean softmax cross-entropy, (1/|D|) sum l(f(x), y) (FedMeta Alg. 1, l. 14)."""
  return tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def batch_stats(logits: tf.Tensor, labels: tf.Tensor) -> 'collections.OrderedDict':
  """Sums that aggregate across clients: loss_sum, correct, num_examples."""
  losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return collections.OrderedDict(
      loss_sum=tf.reduce_sum(losses),
      correct=tf.reduce_sum(tf.cast(tf.equal(predictions, labels), tf.float32)),
      num_examples=tf.cast(tf.size(labels), tf.float32))


def squared_error(predictions: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
  """Mean squared error of [n, 1] (or [n]) predictions against [n] float targets."""
  return tf.reduce_mean(tf.square(tf.reshape(predictions, [-1]) - targets))


def regression_stats(predictions: tf.Tensor, targets: tf.Tensor) -> 'collections.OrderedDict':
  """loss_sum = sum of squared errors; correct = predictions that round to the target."""
  predictions = tf.reshape(predictions, [-1])
  return collections.OrderedDict(
      loss_sum=tf.reduce_sum(tf.square(predictions - targets)),
      correct=tf.reduce_sum(tf.cast(tf.equal(tf.round(predictions), targets), tf.float32)),
      num_examples=tf.cast(tf.size(targets), tf.float32))


@dataclasses.dataclass(frozen=True)
class Loss:
  """value(outputs, y) -> scalar mean loss; stats(outputs, y) -> the aggregated sums."""
  value: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
  stats: Callable[[tf.Tensor, tf.Tensor], 'collections.OrderedDict']
  y_dtype: tf.DType


CROSS_ENTROPY = Loss(cross_entropy, batch_stats, tf.int32)
SQUARED_ERROR = Loss(squared_error, regression_stats, tf.float32)


def kl_to_reference(reference_logits: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
  """Mean KL(p_ref || p) over the batch, p = softmax(logits) (FedEC Eq. 9).

  The reference (FedEC's historical model θ̂_i) is a constant: no gradient
  flows into it.
  """
  ref = tf.stop_gradient(tf.nn.softmax(reference_logits))
  log_ref = tf.stop_gradient(tf.nn.log_softmax(reference_logits))
  log_p = tf.nn.log_softmax(logits)
  return tf.reduce_mean(tf.reduce_sum(ref * (log_ref - log_p), axis=-1))


def squared_distance(weights, reference) -> tf.Tensor:
  """Σ ||w - w_ref||² over all tensors; the reference is a constant."""
  return tf.add_n([tf.reduce_sum(tf.square(w - tf.stop_gradient(r)))
                   for w, r in zip(weights, reference)])
