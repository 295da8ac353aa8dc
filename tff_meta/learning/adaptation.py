"""Inner-loop adaptation: theta' = theta - alpha o grad L_support(theta), repeated.

One function serves MAML (scalar alpha), Meta-SGD (per-parameter alpha, FedMeta
Eq. 3), first-order MAML (inner gradient as a constant) and fine-tuning at
evaluation. The steps are unrolled in Python: second-order gradients through a
`tf.while_loop` can silently come back `None` (TFF_NOTES).
"""

from __future__ import annotations

from typing import Callable, List, Sequence, Union

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
  function of the weights, e.g. `slices.mean_gradient` over a large support set."""
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
