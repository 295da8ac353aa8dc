"""Prototype losses of few-round learning, in pure TF (no TFF placements).

FRL (Park et al., "Few-Round Learning for Federated Learning", Sec. 3.2.1):

- Eq. 1, local prototypes: P^c(k) = mean of f_theta(x) over S_k(c).
- Eq. 2, local prototype loss: the mean over x in S_k of
  d(f(x), P^y) + log sum_{c'} exp(-d(f(x), P^{c'})), d the squared Euclidean
  distance, i.e. the cross-entropy of softmax(-d) (Snell et al. 2017).
- Eq. 3, GPAL auxiliary loss: the same loss for every position i of the dense
  feature map g_theta(x) against the global prototypes P_{r-1}, summed over
  positions and averaged over examples.

Deviation, recorded in docs/RESULTS.md: the paper's Eq. 2 and 3 print the
normalizer as a sum over c' != c. That loss is unbounded below (pushing the
other prototypes away lowers it without limit) and is not the prototypical
network loss the paper cites, so the sum here runs over all classes c' (as in
Snell et al.), which makes the loss -log softmax(-d)_y >= 0.

Classes live in a fixed table of `ways` slots (labels 0..ways-1); a `mask`
(float, 1 = class present) restricts every softmax to the classes that exist
(a client's own classes for Eq. 2, the episode's global classes for Eq. 3).
"""

from __future__ import annotations

from typing import Tuple

import tensorflow as tf

_NEG = -1e9   # logit of an absent class (finite, so 0 * it stays 0 in gradients)


def squared_distances(features: tf.Tensor, protos: tf.Tensor) -> tf.Tensor:
  """||f_b - p_c||^2 for features [..., D] and protos [C, D] -> [..., C]."""
  diff = features[..., tf.newaxis, :] - protos
  return tf.reduce_sum(tf.square(diff), axis=-1)


def prototypes(features: tf.Tensor, labels: tf.Tensor, ways: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """Eq. 1: per-class mean of features [B, D] -> (protos [ways, D], counts [ways]).

  A class with no example gets a zero prototype and count 0.
  """
  one_hot = tf.one_hot(labels, ways, dtype=features.dtype)        # [B, ways]
  counts = tf.reduce_sum(one_hot, axis=0)
  sums = tf.matmul(one_hot, features, transpose_a=True)           # [ways, D]
  return sums / tf.maximum(counts, 1.0)[:, tf.newaxis], counts


def masked_logits(logits: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
  """Logits [..., ways] with absent classes (mask 0) pushed to -1e9."""
  return tf.where(mask > 0, logits, tf.fill(tf.shape(logits), tf.constant(_NEG, logits.dtype)))


def prototype_logits(features: tf.Tensor, protos: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
  """-d(f, P^c), masked to the present classes: [..., ways]."""
  return masked_logits(-squared_distances(features, protos), mask)


def per_example_loss(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
  return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def prototype_loss(features: tf.Tensor, labels: tf.Tensor, protos: tf.Tensor,
                   mask: tf.Tensor) -> tf.Tensor:
  """Eq. 2: mean over examples of d(f(x), P^y) + log sum_c' exp(-d(f(x), P^c'))."""
  return tf.reduce_mean(per_example_loss(prototype_logits(features, protos, mask), labels))


def gpal_loss(dense: tf.Tensor, labels: tf.Tensor, protos: tf.Tensor,
              mask: tf.Tensor) -> tf.Tensor:
  """Eq. 3: dense features [B, h, w, D] against global prototypes [ways, D].

  Every position i of g(x) is classified against the prototypes; the
  per-position losses are summed over positions and averaged over examples.
  """
  batch = tf.shape(dense)[0]
  positions = tf.reshape(dense, [batch, -1, tf.shape(dense)[-1]])     # [B, hw, D]
  logits = prototype_logits(positions, protos, mask)                  # [B, hw, ways]
  tiled = tf.broadcast_to(labels[:, tf.newaxis], tf.shape(logits)[:2])
  return tf.reduce_mean(tf.reduce_sum(per_example_loss(logits, tiled), axis=1))


def nearest_prototype(features: tf.Tensor, protos: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
  """Sec. 3.3: the label of the nearest present prototype, int32 [B]."""
  return tf.argmax(prototype_logits(features, protos, mask), axis=-1, output_type=tf.int32)
