"""Plain-TF step training for the non-federated baselines.

NN(self) and LR/NN in the SELF setting train a fresh model on one test user's
support set; NN(pre-trained) and NN-unified pre-train one model on training
users' data, one user per step (Chen et al. 2018b Sec. 3.1: "each episode
contains one task"; Sec. 3.2: "a batch of 500 data points (or half of the user
records, whichever is smaller) are sampled from a single user"), then fine-
tune. Each step draws a minibatch of min(batch_size, ceil(n / 2)) examples
(with replacement, seeded by (seed, step)); batch_size <= 0 uses all n
examples every step (full-batch).
The optimizer is a `tff.learning.optimizers` optimizer, as on the server.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tff_meta.algorithms import base
from tff_meta.learning import inner_loop, losses, step_scale


class Trainer:
  """Trains weights of `model` under `loss` with a named optimizer (see module doc).

  TFF's functional models run only in graph mode, so the steps are one
  `tf.while_loop` in a private `tf.Graph`, run by a session.
  """

  def __init__(self, model, loss: losses.Loss, optimizer: str, learning_rate: float,
               batch_size: int = 0, step_scales: Optional[Sequence[float]] = None):
    self.model, self.loss, self.batch_size = model, loss, int(batch_size)
    self.learning_rate = float(learning_rate)
    self.optimizer = base.build_optimizer(optimizer, learning_rate)
    if step_scales is not None:   # per-weight multiples of the step (learning.step_scale)
      self.optimizer = step_scale.scaled(self.optimizer, tuple(step_scales))
    graph = tf.Graph()
    with graph.as_default():
      placeholder = tf.compat.v1.placeholder
      specs = tuple(tf.TensorSpec(w.shape, tf.float32) for w in model.initial_trainable)
      self._init = tf.nest.map_structure(tf.convert_to_tensor, self.optimizer.initialize(specs))
      self._w = tuple(placeholder(tf.float32, s.shape) for s in specs)
      self._s = tf.nest.map_structure(lambda t: placeholder(t.dtype, t.shape), self._init)
      self._x = placeholder(model.x_spec.dtype, model.x_spec.shape)
      self._y = placeholder(loss.y_dtype, [None])
      self._steps = placeholder(tf.int32, [])
      self._seed = placeholder(tf.int32, [])
      self._out = self._train(self._w, self._s, self._x, self._y, self._steps, self._seed)
      self._logits = model.logits(list(self._w), self._x)
    self._session = tf.compat.v1.Session(graph=graph)

  def _train(self, weights, state, x, y, steps, seed):
    n = tf.shape(y)[0]
    batch = tf.minimum(self.batch_size, (n + 1) // 2)

    def body(i, w, s):
      if self.batch_size > 0:
        idx = tf.random.stateless_uniform([batch], seed=tf.stack([seed, i]), maxval=n,
                                          dtype=tf.int32)
      else:
        idx = tf.range(n)
      with tf.GradientTape() as tape:
        tape.watch(w)
        value = self.loss.value(self.model.logits(list(w), tf.gather(x, idx)), tf.gather(y, idx))
      grads = tuple(inner_loop.dense(tape.gradient(value, list(w))))
      s, w = self.optimizer.next(s, w, grads)
      return i + 1, tuple(w), s

    _, weights, state = tf.while_loop(lambda i, w, s: i < steps, body,
                                      (tf.constant(0), tuple(weights), state))
    return weights, state

  def _feed(self, weights, state=None, **extra):
    feed = dict(zip(self._w, weights))
    if state is not None:
      feed.update(zip(tf.nest.flatten(self._s), tf.nest.flatten(state)))
    feed.update({getattr(self, '_' + k): v for k, v in extra.items()})
    return feed

  def initialize(self, weights: Sequence[np.ndarray]):
    """A fresh optimizer state (numpy structure)."""
    del weights
    return self._session.run(self._init)

  def run(self, weights, state, x: np.ndarray, y: np.ndarray, steps: int,
          seed: int = 0) -> Tuple[List[np.ndarray], object]:
    """`steps` optimizer steps on (x, y); returns (weights, optimizer state) as numpy."""
    if steps <= 0:
      return list(weights), state
    w, s = self._session.run(self._out, self._feed(weights, state, x=x, y=y, steps=int(steps),
                                                   seed=int(seed)))
    return list(w), s

  def fit(self, weights, x: np.ndarray, y: np.ndarray, steps: int, seed: int = 0):
    """Fresh optimizer state, `steps` steps; returns the trained weights."""
    return self.run(weights, self.initialize(weights), x, y, steps, seed)[0]

  def predict(self, weights, x: np.ndarray) -> np.ndarray:
    return self._session.run(self._logits, self._feed(weights, x=x))
