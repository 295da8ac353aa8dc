"""Losses and per-batch statistics on logits."""

from __future__ import annotations

import collections

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
