"""Client FLOPs: an analytical count per model, and per client round per algorithm.

FedMeta (Chen et al. 2018, Fig. 3) compares methods by the total FLOPs across
all devices needed to reach a target accuracy. This module counts them
analytically from the Keras model's layers; `profile_function_flops` measures
a traced TF function with TensorFlow's profiler, and tests/evaluation/
test_flops.py checks the two against each other.

Forward pass, per example:

- 1 multiply-add = 2 FLOPs. Dense: 2 * in * out, + out for the bias add (per
  position on a sequence). Conv2D: 2 * kh * kw * (cin / groups) per output
  element, + 1 per output element for the bias.
- A nonlinearity (relu, sigmoid, tanh, softmax, ...) costs 1 FLOP per element
  it is applied to; 'linear' costs 0.
- Max/average pooling: kernel_area FLOPs per output element (comparisons or
  additions, TF's profiler convention); global pooling: 1 per input element.
- Flatten, Reshape, Permute, InputLayer, Dropout (identity), Embedding and
  frozen embeddings: 0 (reshapes and table look-ups move memory, they do not
  compute).
- LSTM (`RNN(LSTMCell)` or `LSTM`), per time step, Keras' fused
  implementation (z = x W + h U + b; i, f, o = sigmoid, g = tanh;
  c = f * c' + i * g; h = o * tanh(c)): 2 * 4u * (in + u) for the two
  products, + 4u (their sum), + 4u (bias), + 4u (three products and a sum for
  c and h), + 5u (3 sigmoids, 2 tanh). SimpleRNN: 2 * u * (in + u) + u (sum)
  + u (bias) + u (activation). Every time step counts, with or without
  `return_sequences`.
- The loss (softmax cross-entropy on the logits) is not part of the model
  and is not counted: O(classes) per example, under 0.1% for every model here.

TensorFlow's profiler (`tf.compat.v1.profiler`, `float_operation()`) counts
MatMul and Conv2D at 2 FLOPs per multiply-add, BiasAdd at 1 per element,
MaxPool at kernel_area per output element, Add/Mul at 1 per element, and 0
for Relu/Sigmoid/Tanh (no FLOPs statistic is registered for them).
`LayerFlops.profiler_comparable` (everything but the nonlinearities) equals
the profiler's count exactly for Dense, Conv2D, pooling and (unrolled) LSTM
layers; the test checks this.

Client work per round (n examples; F forward FLOPs per example; P trainable
parameters):

- Backward pass, per example: B_F = 2F - S. Each product layer needs the
  gradient with respect to its input and the one with respect to its
  weights, each a product of the forward's size (2F in all; the bias
  gradient is a sum over the batch, ~1 per element, and the nonlinearity's
  derivative ~1 per element). TF's tape skips the input gradient of the first
  Dense/Conv2D layer when the model's input needs none (data, or a frozen
  embedding): S = 2 * its multiply-adds, else 0. (Inside an RNN's while loop
  TF differentiates every loop input, so no skip is assumed for a leading
  LSTM.) One training step on n examples costs n (F + B_F).

Each algorithm counts one client's round next to the client work it counts
(the `round_flops` of its module in tff_meta/algorithms/, registered in its
`AlgorithmEntry`), from the `ModelCost` here (F, B_F, P) and
`optimizer_step_flops` (c_opt FLOPs per parameter of a local optimizer step,
OPTIMIZER_FLOPS_PER_PARAM: sgd 2, momentum 4, adam 12); `client_flops_fn`
applies it to one client's round data.

Only training is counted; evaluation (adaptation on test clients) is not.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, List, Mapping

import numpy as np
import tensorflow as tf

# FLOPs per trainable parameter of one local optimizer step (FedAvg's client
# optimizer, `tff.learning.optimizers`). sgd: lr * g, then w - that.
# momentum: m = mu m + g, w - lr m. adam: a += (g - a)(1 - b1) (3),
# p += (g^2 - p)(1 - b2) (4), w -= lr a / (sqrt(p) + eps) (5).
OPTIMIZER_FLOPS_PER_PARAM = {'sgd': 2, 'momentum': 4, 'adam': 12}


class UnsupportedLayerError(ValueError):
  pass


@dataclasses.dataclass(frozen=True)
class LayerFlops:
  """Forward FLOPs of one layer for one example.

  Attributes:
    name: the layer's name.
    kind: the layer's class name.
    macs: multiply-adds of the layer's products (matmul, convolution).
    bias: bias additions.
    elementwise: other arithmetic TF's profiler counts (pooling comparisons,
      the LSTM's sums and gate products).
    activation: nonlinearities, 1 per element (TF's profiler counts 0).
    input_macs: the multiply-adds that multiply the layer's input (its input
      gradient costs as much); all of `macs` for Dense and Conv2D.
    trainable: whether the layer has trainable weights.
  """
  name: str
  kind: str
  macs: int = 0
  bias: int = 0
  elementwise: int = 0
  activation: int = 0
  input_macs: int = 0
  trainable: bool = False

  @property
  def flops(self) -> int:
    return 2 * self.macs + self.bias + self.elementwise + self.activation

  @property
  def profiler_comparable(self) -> int:
    """What `tf.compat.v1.profiler` counts for this layer: all but nonlinearities."""
    return 2 * self.macs + self.bias + self.elementwise


@dataclasses.dataclass(frozen=True)
class ModelCost:
  """A model's costs per example (FLOPs) and its trainable parameter count."""
  forward: int
  backward: int
  params: int

  @property
  def train_step(self) -> int:
    """Forward + backward for one example."""
    return self.forward + self.backward


def _per_example(shape, layer) -> List[int]:
  if isinstance(shape, list):   # a layer with several inputs or outputs
    raise UnsupportedLayerError(f'Layer {layer.name!r} has several inputs or outputs.')
  dims = list(tf.TensorShape(shape))[1:]
  if any(d is None for d in dims):
    raise UnsupportedLayerError(
        f'Layer {layer.name!r} has an unknown non-batch dimension {tuple(shape)}; FLOPs per '
        'example need fixed shapes (e.g. a fixed sequence length).')
  return [int(d) for d in dims]


def _activation_flops(activation, num_elements: int) -> int:
  if activation is None or activation is tf.keras.activations.linear:
    return 0
  return num_elements


def _rnn_flops(layer, in_shape, trainable) -> LayerFlops:
  cell = layer.cell
  steps, features = in_shape[0], in_shape[-1]
  units = int(cell.units)
  bias = bool(getattr(cell, 'use_bias', True))
  kind = type(layer).__name__
  if isinstance(cell, tf.keras.layers.LSTMCell):
    gates = 4 * units
    return LayerFlops(
        layer.name, kind, macs=steps * gates * (features + units),
        bias=steps * gates * bias,
        elementwise=steps * (gates + 4 * units),     # x W + h U; f*c' + i*g; o*tanh(c)
        activation=steps * (_activation_flops(cell.recurrent_activation, 3 * units)
                            + _activation_flops(cell.activation, 2 * units)),
        input_macs=steps * gates * features, trainable=trainable)
  if isinstance(cell, tf.keras.layers.SimpleRNNCell):
    return LayerFlops(
        layer.name, kind, macs=steps * units * (features + units),
        bias=steps * units * bias, elementwise=steps * units,
        activation=steps * _activation_flops(cell.activation, units),
        input_macs=steps * units * features, trainable=trainable)
  raise UnsupportedLayerError(
      f'Layer {layer.name!r}: FLOPs of RNN cell {type(cell).__name__} are not modelled '
      '(LSTMCell and SimpleRNNCell are).')


def layer_flops(layer: tf.keras.layers.Layer) -> List[LayerFlops]:
  """Per-example forward FLOPs of `layer` (a list: a nested model gives several)."""
  from tff_meta.models.keras_models import FrozenEmbedding  # pylint: disable=g-import-not-at-top
  if isinstance(layer, tf.keras.Model):
    return [f for sub in layer.layers for f in layer_flops(sub)]
  kind = type(layer).__name__
  trainable = bool(layer.trainable_weights)
  zero_cost = (tf.keras.layers.InputLayer, tf.keras.layers.Flatten, tf.keras.layers.Reshape,
               tf.keras.layers.Permute, tf.keras.layers.Dropout, tf.keras.layers.Embedding,
               FrozenEmbedding)
  if isinstance(layer, zero_cost):
    return [LayerFlops(layer.name, kind, trainable=trainable)]
  in_shape = _per_example(layer.input_shape, layer)
  out_shape = _per_example(layer.output_shape, layer)
  out_elements = int(np.prod(out_shape, dtype=np.int64))
  if isinstance(layer, tf.keras.layers.Dense):
    macs = out_elements * in_shape[-1]
    return [LayerFlops(layer.name, kind, macs=macs, bias=out_elements if layer.use_bias else 0,
                       activation=_activation_flops(layer.activation, out_elements),
                       input_macs=macs, trainable=trainable)]
  if isinstance(layer, tf.keras.layers.Conv2D) and not isinstance(
      layer, (tf.keras.layers.Conv2DTranspose, tf.keras.layers.DepthwiseConv2D)):
    if layer.data_format != 'channels_last':
      raise UnsupportedLayerError(f'Conv2D {layer.name!r}: only channels_last is modelled.')
    kh, kw = layer.kernel_size
    macs = out_elements * kh * kw * in_shape[-1] // int(getattr(layer, 'groups', 1))
    return [LayerFlops(layer.name, kind, macs=macs, bias=out_elements if layer.use_bias else 0,
                       activation=_activation_flops(layer.activation, out_elements),
                       input_macs=macs, trainable=trainable)]
  if isinstance(layer, (tf.keras.layers.MaxPooling2D, tf.keras.layers.AveragePooling2D,
                        tf.keras.layers.MaxPooling1D, tf.keras.layers.AveragePooling1D)):
    area = int(np.prod(layer.pool_size))
    return [LayerFlops(layer.name, kind, elementwise=area * out_elements)]
  if isinstance(layer, (tf.keras.layers.GlobalMaxPooling2D,
                        tf.keras.layers.GlobalAveragePooling2D,
                        tf.keras.layers.GlobalMaxPooling1D,
                        tf.keras.layers.GlobalAveragePooling1D)):
    return [LayerFlops(layer.name, kind, elementwise=int(np.prod(in_shape)))]
  if isinstance(layer, tf.keras.layers.Activation):
    return [LayerFlops(layer.name, kind,
                       activation=_activation_flops(layer.activation, out_elements))]
  if isinstance(layer, (tf.keras.layers.ReLU, tf.keras.layers.Softmax)):
    return [LayerFlops(layer.name, kind, activation=out_elements)]
  if isinstance(layer, tf.keras.layers.RNN):
    return [_rnn_flops(layer, in_shape, trainable)]
  raise UnsupportedLayerError(
      f'No FLOPs model for layer {layer.name!r} ({kind}); add one to '
      'tff_meta/evaluation/flops.py:layer_flops.')


def keras_model_of(model) -> tf.keras.Model:
  """The Keras model behind `model` (a Keras model, or a `ModelSpec`).

  `ModelSpec` keeps only TFF's functional model, which holds the Keras model
  it was built from in its `predict_on_batch` closure (TFF 0.87). A spec with
  a `keras_model` attribute is used directly.
  """
  if isinstance(model, tf.keras.Model):
    return model
  if isinstance(getattr(model, 'keras_model', None), tf.keras.Model):
    return model.keras_model
  predict = getattr(getattr(model, 'functional', None), '_predict_on_batch_fn', None)
  python_fn = getattr(predict, 'python_function', predict)
  if python_fn is not None:
    try:
      found = inspect.getclosurevars(python_fn).nonlocals.get('keras_model')
    except TypeError:
      found = None
    if isinstance(found, tf.keras.Model):
      return found
    if callable(found):
      return found()
  raise TypeError(f'Cannot find the Keras model of {type(model).__name__}; pass a '
                  'tf.keras.Model or a ModelSpec built by tff_meta.models.build_model_spec.')


def forward_flops_breakdown(model) -> List[LayerFlops]:
  """Per-layer forward FLOPs for one example, in layer order."""
  keras_model = keras_model_of(model)
  if not keras_model.built:
    raise ValueError('Build the Keras model (give it an input shape) before counting FLOPs.')
  return [f for layer in keras_model.layers for f in layer_flops(layer)]


def model_forward_flops(keras_model) -> int:
  """Forward-pass FLOPs for one example (a Keras model or a `ModelSpec`)."""
  return int(sum(f.flops for f in forward_flops_breakdown(keras_model)))


def _skipped_input_gradient(breakdown: List[LayerFlops]) -> int:
  """FLOPs of the first layer's input gradient, which TF's tape does not compute."""
  for f in breakdown:
    if f.macs:
      return 2 * f.input_macs if f.kind in ('Dense', 'Conv2D') else 0
    if f.trainable:      # e.g. a trained embedding: its output needs a gradient
      return 0
  return 0


def model_cost(model) -> ModelCost:
  """Forward and backward FLOPs per example and parameter count of `model`."""
  keras_model = keras_model_of(model)
  breakdown = forward_flops_breakdown(keras_model)
  forward = int(sum(f.flops for f in breakdown))
  params = int(sum(int(np.prod(w.shape)) for w in keras_model.trainable_weights))
  return ModelCost(forward=forward, backward=2 * forward - _skipped_input_gradient(breakdown),
                   params=params)


def client_flops_fn(round_flops: Callable[[ModelCost, int, int, int], int],
                    model) -> Callable[[Mapping[str, Any]], int]:
  """`fn(one client's round data) -> FLOPs`, for `Algorithm.client_flops`.

  `round_flops(cost, num_support, num_query, num_examples)` is the
  algorithm's count (its module's). The data are what the process consumes
  for one client: `x`/`y` (full data: num_examples = len(y)) or
  `support_*`/`query_*` (an episode: num_examples = support + query). The
  model is counted once, on first use.
  """
  cache = []

  def fn(data: Mapping[str, Any]) -> int:
    if not cache:
      cache.append(model_cost(model))
    if 'y' in data:
      n_s, n_q, n = 0, 0, len(data['y'])
    else:
      n_s, n_q = len(data['support_y']), len(data['query_y'])
      n = n_s + n_q
    return round_flops(cache[0], n_s, n_q, n)

  return fn


def optimizer_step_flops(optimizer: str, params: int) -> int:
  """FLOPs of one step of local optimizer `optimizer` on `params` parameters."""
  if optimizer not in OPTIMIZER_FLOPS_PER_PARAM:
    raise ValueError(f'No FLOPs per parameter for client optimizer {optimizer!r}; '
                     f'known: {sorted(OPTIMIZER_FLOPS_PER_PARAM)}.')
  return params * OPTIMIZER_FLOPS_PER_PARAM[optimizer]


def profile_graph_flops(graph: tf.Graph) -> int:
  """Total float operations TensorFlow's profiler counts in `graph`."""
  from tensorflow.python.util import deprecation  # pylint: disable=g-import-not-at-top
  options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
  options['output'] = 'none'
  with deprecation.silence():
    result = tf.compat.v1.profiler.profile(graph=graph, run_meta=tf.compat.v1.RunMetadata(),
                                           cmd='op', options=options)
  return int(result.total_float_ops)


def profile_function_flops(fn: Callable, *input_specs: tf.TensorSpec,
                           in_graph: bool = True) -> int:
  """Profiler FLOPs of `fn` traced on fully-shaped `input_specs`.

  Its variables are frozen to constants and its nested function calls (Keras
  layers, TFF's `predict_on_batch`) are inlined, so that the profiler, which
  sees only the top-level graph, counts every operation. `in_graph` traces
  inside a graph context, which TFF's functional models (`ModelSpec.logits`)
  need; a Keras model whose variables live in eager mode needs
  `in_graph=False`.
  """
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.python.framework import convert_to_constants

  def freeze():
    concrete = tf.function(fn, autograph=False).get_concrete_function(*input_specs)
    return convert_to_constants.convert_variables_to_constants_v2(concrete).graph.as_graph_def()

  if in_graph:
    with tf.Graph().as_default():
      graph_def = freeze()
  else:
    graph_def = freeze()
  with tf.Graph().as_default() as graph:
    tf.graph_util.import_graph_def(graph_def, name='')
  return profile_graph_flops(graph)


def profile_forward_flops(keras_model: tf.keras.Model, batch_size: int = 1) -> int:
  """Profiler FLOPs of the Keras model's forward pass on `batch_size` examples."""
  spec = keras_model.inputs[0]
  input_spec = tf.TensorSpec([batch_size, *spec.shape[1:]], spec.dtype)
  return profile_function_flops(lambda x: keras_model(x, training=False), input_spec,
                                in_graph=False)
