"""A model as a pure function of explicit weight tensors.

Meta-learning differentiates the query loss through the inner SGD steps
(FedMeta Eq. 2), so the forward pass must be a function of weight *tensors*,
not Keras variables (`set_weights` and model copies cut the gradient path).
`ModelSpec` wraps TFF's `tff.learning.models.functional_model_from_keras`,
whose `predict_on_batch(weights, x)` second-order gradients pass through.
Like TFF's functional models it must be called inside a TFF computation or a
`tf.function` (graph mode).
"""

from __future__ import annotations

import collections
import dataclasses
import weakref
from typing import Any, Callable, List, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.models.keras_models import MODELS


@dataclasses.dataclass
class ModelSpec:
  """A named model in functional form.

  Attributes:
    name: the registry name.
    functional: the `tff.learning.models.FunctionalModel`.
    x_spec: `tf.TensorSpec` of a batch of inputs.
    num_classes: number of output logits.
    initial_trainable: the initial trainable weights (numpy, Keras order).
    frozen: non-trainable weights (e.g. frozen GloVe embeddings); constants.
    weight_layers: for each trainable weight, the (index among layers with
      trainable weights, layer name) it belongs to; `models.split` uses it.
  """
  name: str
  functional: Any
  x_spec: tf.TensorSpec
  num_classes: int
  initial_trainable: List[np.ndarray]
  frozen: List[np.ndarray]
  weight_layers: List[Tuple[int, str]] = dataclasses.field(default_factory=list)
  _frozen_by_graph: 'weakref.WeakKeyDictionary' = dataclasses.field(
      default_factory=weakref.WeakKeyDictionary, repr=False, compare=False)

  @property
  def weight_specs(self) -> List[tf.TensorSpec]:
    return [tf.TensorSpec(w.shape, tf.float32) for w in self.initial_trainable]

  @property
  def weights_type(self) -> tff.Type:
    return tff.types.tensorflow_to_type(self.weight_specs)

  @property
  def num_parameters(self) -> int:
    return int(sum(w.size for w in self.initial_trainable))

  def logits(self, weights: Sequence[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
    """Logits of `x` under trainable `weights` (differentiable in `weights`)."""
    graph = tf.compat.v1.get_default_graph()
    frozen = self._frozen_by_graph.get(graph)
    if frozen is None:   # one constant per graph, however many forward passes use it
      frozen = tuple(tf.constant(w) for w in self.frozen)
      self._frozen_by_graph[graph] = frozen
    return self.functional.predict_on_batch((tuple(weights), frozen), x, training=True)


def build_model_spec(name: str, element_shape: Sequence[int], num_classes: int,
                     x_dtype: Any = np.float32, seed: int = 0,
                     **options) -> ModelSpec:
  """Builds the registered Keras model `name` and its functional form.

  Initial weights are drawn with `seed`, so every algorithm in a comparison
  starts from the same point.
  """
  builder: Callable[..., tf.keras.Model] = MODELS.get(name)
  tf.keras.utils.set_random_seed(seed)
  keras_model = builder(tuple(element_shape), num_classes, **options)
  non_trainable_updating = [
      layer.name for layer in keras_model.layers
      if isinstance(layer, tf.keras.layers.BatchNormalization)]
  if non_trainable_updating:
    raise ValueError(
        f'Model {name!r} has BatchNormalization layers {non_trainable_updating}; '
        'functional models cannot update their statistics. Use a model '
        'without batch normalization (or group normalization).')
  x_dtype = tf.as_dtype(x_dtype)
  x_spec = tf.TensorSpec([None, *element_shape], x_dtype)
  input_spec = collections.OrderedDict(x=x_spec, y=tf.TensorSpec([None], tf.int32))
  functional = tff.learning.models.functional_model_from_keras(
      keras_model,
      loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(input_spec['x'], input_spec['y']))
  trainable, frozen = functional.initial_weights
  weight_layers = []
  weighted = [layer for layer in keras_model.layers if layer.trainable_weights]
  for index, layer in enumerate(weighted):
    weight_layers.extend((index, layer.name) for _ in layer.trainable_weights)
  if len(weight_layers) != len(trainable):   # nested models: no per-layer map
    weight_layers = []
  return ModelSpec(
      name=name, functional=functional, x_spec=x_spec, num_classes=num_classes,
      initial_trainable=[np.asarray(w, np.float32) for w in trainable],
      frozen=[np.asarray(w) for w in frozen], weight_layers=weight_layers)
