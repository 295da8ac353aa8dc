"""Per-tensor step sizes for any TFF optimizer: a multiple of its rate for chosen tensors.

`ScaledSteps(optimizer, scales)` takes the step that `optimizer` would take,
w' - w, and applies c_i (w'_i - w_i) to tensor i instead. For SGD this is a
learning rate of c_i times the optimizer's; for Adam, whose step does not
depend on the gradient's scale, it is the only way to give some tensors a
larger or smaller rate than others. The optimizer's own state (Adam's
moments, its learning rate, which `recommendation.schedules` may set) is
left as the optimizer keeps it.

Used where a few tensors are updated far more rarely than the rest: the
movie factors of `rating_factor_mlp`, of which one episode (one user) moves
only the rated movies' rows (`recommendation.config.factor_lr_scale`).
"""

from __future__ import annotations

from typing import Mapping

import tensorflow as tf
import tensorflow_federated as tff


class ScaledSteps(tff.learning.optimizers.Optimizer):
  """`optimizer` with its step to each tensor of the weights times its scale.

  `scales` has the weights' structure, with a float in place of each tensor;
  for weights that are a mapping it may be a mapping of some of their keys
  (e.g. {'weights': [...]} for FedMeta's params, whose Meta-SGD `rates` then
  step as the optimizer steps them).
  """

  def __init__(self, optimizer: tff.learning.optimizers.Optimizer, scales):
    self._optimizer = optimizer
    self._scales = scales

  def _flat_scales(self, weights):
    if isinstance(self._scales, Mapping) and isinstance(weights, Mapping):
      unknown = set(self._scales) - set(weights)
      if unknown:
        raise ValueError(f'ScaledSteps has scales for {sorted(unknown)}, not in the weights.')
      scales = type(weights)(
          (k, self._scales[k] if k in self._scales else tf.nest.map_structure(lambda _: 1.0, v))
          for k, v in weights.items())
      return [float(c) for c in tf.nest.flatten(scales)]
    return [float(c) for c in tf.nest.flatten(self._scales)]

  def initialize(self, specs):
    return self._optimizer.initialize(specs)

  def next(self, state, weights, gradients):
    state, stepped = self._optimizer.next(state, weights, gradients)
    flat_w, flat_s = tf.nest.flatten(weights), tf.nest.flatten(stepped)
    scales = self._flat_scales(weights)
    if len(flat_w) != len(scales):
      raise ValueError(f'ScaledSteps has {len(scales)} scales for {len(flat_w)} tensors.')
    out = [s if c == 1.0 else w + c * (s - w) for w, s, c in zip(flat_w, flat_s, scales)]
    return state, tf.nest.pack_sequence_as(stepped, out)

  def get_hparams(self, state):
    return self._optimizer.get_hparams(state)

  def set_hparams(self, state, hparams):
    return self._optimizer.set_hparams(state, hparams)


def scaled(optimizer, scales):
  """`optimizer` itself when every scale is 1 (the same computation), else `ScaledSteps`."""
  if all(float(c) == 1.0 for c in tf.nest.flatten(scales)):
    return optimizer
  return ScaledSteps(optimizer, scales)
