"""TFF's Adam in the clients' local loops, applied in place by TensorFlow's fused kernel.

FedMeta Appendix A.2 trains FedAvg's clients with Adam. TFF's
`tff.learning.optimizers.build_adam` writes its step as about eleven
element-wise TensorFlow ops per weight tensor, each a separate pass over the
tensor. On the FEMNIST CNN (6.6 M weights, 26 MB) those passes cost more than
the minibatch's forward and backward pass, so a FedAvg client spent most of its
time in the optimizer. `ResourceApplyAdam` does the same update in one pass
over the weight, its two slots and the gradient:

    lr_t = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)
    m   <- m + (g - m)(1 - beta_1)
    v   <- v + (g^2 - v)(1 - beta_2)
    w   <- w - lr_t m / (sqrt(v) + epsilon)

which is Kingma & Ba (2015) Alg. 1 in the form TFF's `adam.py` computes
(its `accumulator` is m, its `preconditioner` v, the same epsilon). The two
agree to float rounding (`tests/learning/test_fused_adam.py`); the fused
kernel needs the weights in variables, so it is used only by
`local_training.train_minibatches`, where a client's weights live for the
whole loop, for the optimizer `tff.learning.optimizers.build_adam` returns
(its hparams read through `get_hparams`). Everywhere else (the server's
step, any wrapped optimizer) the same object is TFF's functional Adam: an
algorithm names `adam` and nothing about how it is applied.

The variables exist only inside one graph (one client computation); they are
assigned from the computation's inputs before the first step and read once
after the last, so nothing is kept between calls. A graph that cannot hold
new variables (a `tf.function` or a control-flow body) gets the functional
loop instead (`can_apply_in_place`).
"""

from __future__ import annotations

from typing import List, Sequence

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow.python.framework import func_graph  # pylint: disable=g-direct-tensorflow-import


# The class of the optimizer `tff.learning.optimizers.build_adam` returns.
TFF_ADAM = type(tff.learning.optimizers.build_adam(0.001))


def can_apply_in_place(optimizer) -> bool:
  """True for TFF's Adam in a graph that may create variables (not a FuncGraph)."""
  return (isinstance(optimizer, TFF_ADAM)
          and not isinstance(tf.compat.v1.get_default_graph(), func_graph.FuncGraph))


# The op of the fused step `InPlaceAdam.apply` emits.
IN_PLACE_OP = 'ResourceApplyAdam'


def steps_in_graph(graph: tf.compat.v1.GraphDef) -> bool:
  """Whether `graph` (or a function in its library) steps an `InPlaceAdam`: holds its op."""
  return any(node.op == IN_PLACE_OP for node in graph.node) or any(
      node.op == IN_PLACE_OP for f in graph.library.function for node in f.node_def)


class InPlaceAdam:
  """The weights and Adam slots of one local loop, as variables of the current graph.

  `init_ops` assigns `weights` and zeroes the slots; `read(after)` and
  `apply(step, grads, after)` order themselves after the given tensor, which is
  how a `tf.while_loop` body sequences its reads and updates.
  """

  def __init__(self, optimizer, weights: Sequence[tf.Tensor]):
    hparams = optimizer.get_hparams(optimizer.initialize(()))   # its constructor's values
    self._lr, self._beta_1, self._beta_2, self._epsilon = (
        tf.cast(hparams[k], tf.float32) for k in ('learning_rate', 'beta_1', 'beta_2', 'epsilon'))
    new = lambda w: tf.Variable(tf.zeros(w.shape, w.dtype), trainable=False)
    self._weights = [new(w) for w in weights]
    self._m = [new(w) for w in weights]
    self._v = [new(w) for w in weights]
    self.init_ops = ([var.assign(w) for var, w in zip(self._weights, weights)]
                     + [s.assign(tf.zeros_like(s)) for s in self._m + self._v])

  def read(self, after: tf.Tensor) -> List[tf.Tensor]:
    with tf.control_dependencies([after]):
      return [var.read_value() for var in self._weights]

  def apply(self, step: tf.Tensor, grads: Sequence[tf.Tensor]) -> List[tf.Operation]:
    """Adam step number `step` (1 for the first) with `grads`; the update ops. A weight
    whose gradient is None keeps its value and slots, as in TFF's Adam."""
    t = tf.cast(step, tf.float32)
    return [getattr(tf.raw_ops, IN_PLACE_OP)(
        var=var.handle, m=m.handle, v=v.handle, beta1_power=tf.pow(self._beta_1, t),
        beta2_power=tf.pow(self._beta_2, t), lr=self._lr, beta1=self._beta_1,
        beta2=self._beta_2, epsilon=self._epsilon, grad=g)
            for var, m, v, g in zip(self._weights, self._m, self._v, grads) if g is not None]
