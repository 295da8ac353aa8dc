"""The few-round model: a CNN backbone plus a classifier, as pure functions of weights.

FRL (Park et al., `../shared/papers/001_*.txt`, Sec. 4 "Comparison schemes"):

- distance classifier (Snell et al. 2017): no extra weights; f(x) is the CNN
  output and a query is classified by its nearest prototype. Its local loss is
  Eq. 2 plus gamma times the GPAL loss Eq. 3 (Eq. 4); gamma = 0 is "FRL:
  Distance", gamma > 0 "FRL: Distance + GPAL".
- linear classifier: a linear layer on f(x) with `ways` outputs; in random-way
  tasks `ways` is the largest N (7) and the logits are masked to the task's
  tau classes. The local and query losses are the masked cross-entropy. The
  FedAvg and fine-tuning baselines use it too.

The backbone is a registered model built with `num_classes=0`, so its output
is the dense feature map g(x) [B, h, w, D]; f(x) is its average over the
positions (the paper's "output of the last CNN layer, immediately before
average pooling" is g). Weights are one flat list: backbone, then head.
`CLASSIFIERS` maps 'distance' / 'scaled_distance' (a learned temperature on the
distances) / 'linear' to the classifier objects.
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence

import numpy as np
import tensorflow as tf

from tff_meta.fewround import prototypes as proto_lib
from tff_meta.models import ModelSpec, build_model_spec
from tff_meta.registry import Registry

CLASSIFIERS: Registry = Registry('few-round classifier')


@dataclasses.dataclass
class ClientBatch:
  """What a classifier needs from one client: inputs, labels, the task's class mask."""
  x: tf.Tensor
  y: tf.Tensor
  way_mask: tf.Tensor   # float [ways]: 1 for the task's tau classes


class DistanceClassifier:
  """Prototypes and squared Euclidean distances (Eq. 1-4)."""
  zero_head_allowed = False   # `zero_head` leaves its head (none, or the temperature) alone
  learns_temperature = False  # its head is the temperature's t (ScaledDistanceClassifier)

  def head(self, feature_dim: int, ways: int, rng: np.random.Generator) -> List[np.ndarray]:
    del feature_dim, ways, rng
    return []

  def scale(self, model: 'FewRoundModel', weights):
    """s, with distances s^2 d; None here: the paper's Eq. 1-3, computed as written."""
    del model, weights
    return None

  def _scaled(self, model, weights, *tensors):
    s = self.scale(model, weights)
    return tensors if s is None else tuple(s * t for t in tensors)

  def local_loss(self, model: 'FewRoundModel', weights, batch: ClientBatch, global_protos,
                 global_mask, gamma) -> tf.Tensor:
    """Eq. 4: Eq. 2 with this client's prototypes + gamma * Eq. 3 with the global ones."""
    dense, global_protos = self._scaled(model, weights, model.dense(weights, batch.x),
                                        global_protos)
    features = model.pool(dense)
    local, counts = proto_lib.prototypes(features, batch.y, model.ways)
    loss = proto_lib.prototype_loss(features, batch.y, local, tf.cast(counts > 0, tf.float32))
    aux = proto_lib.gpal_loss(dense, batch.y, global_protos, global_mask)
    # tf.where: with gamma = 0 (round 0, no global prototypes yet) the aux term is skipped.
    return loss + tf.where(gamma > 0, gamma * aux, 0.0)

  def logits(self, model: 'FewRoundModel', weights, x, way_mask, global_protos,
             global_mask) -> tf.Tensor:
    """-s^2 d(f(x), P^c): its argmax is the nearest global prototype (Sec. 3.3)."""
    del way_mask
    features, global_protos = self._scaled(model, weights, model.embed(weights, x),
                                           global_protos)
    return proto_lib.prototype_logits(features, global_protos, global_mask)


class ScaledDistanceClassifier(DistanceClassifier):
  """The distance classifier with a learned temperature: distances tau * d, tau = exp(t).

  The head is the one scalar t (0 at the start: the paper's classifier).
  Prototypes are means of f(x) as before, so the clients' and the server's
  prototypes are unchanged; every distance of Eq. 2-3 and of the test-time
  logits is multiplied by tau, which is the metric scaling of Oreshkin et al.
  (2018, TADAM, Sec. 2.1). Meta-training can then set the softmax's
  sharpness through tau instead of by drawing the embeddings together
  (docs/RESULTS.md of 3ab6296, §9a). The nearest prototype, and so test accuracy for a
  given theta_R, does not depend on tau.
  """
  learns_temperature = True

  def head(self, feature_dim: int, ways: int, rng: np.random.Generator) -> List[np.ndarray]:
    del feature_dim, ways, rng
    return [np.zeros([], np.float32)]

  def scale(self, model: 'FewRoundModel', weights) -> tf.Tensor:
    """sqrt(tau) = exp(t / 2), so that squared distances are scaled by tau."""
    return tf.exp(0.5 * list(weights)[model.num_backbone])


class LinearClassifier:
  """A linear layer on f(x), logits masked to the task's classes."""
  zero_head_allowed = True
  learns_temperature = False

  def head(self, feature_dim: int, ways: int, rng: np.random.Generator) -> List[np.ndarray]:
    limit = np.sqrt(6.0 / (feature_dim + ways))   # Glorot uniform, as Keras' Dense
    return [rng.uniform(-limit, limit, (feature_dim, ways)).astype(np.float32),
            np.zeros([ways], np.float32)]

  def logits(self, model: 'FewRoundModel', weights, x, way_mask, global_protos=None,
             global_mask=None) -> tf.Tensor:
    del global_protos, global_mask
    kernel, bias = weights[model.num_backbone:]
    return proto_lib.masked_logits(tf.matmul(model.embed(weights, x), kernel) + bias, way_mask)

  def local_loss(self, model: 'FewRoundModel', weights, batch: ClientBatch, global_protos,
                 global_mask, gamma) -> tf.Tensor:
    del global_protos, global_mask, gamma
    logits = self.logits(model, weights, batch.x, batch.way_mask)
    return tf.reduce_mean(proto_lib.per_example_loss(logits, batch.y))


CLASSIFIERS.add('distance', DistanceClassifier())
CLASSIFIERS.add('scaled_distance', ScaledDistanceClassifier())
# The FRL methods' classifier for each value of the config's `temperature`.
DISTANCE_CLASSIFIERS = {'none': 'distance', 'learned': 'scaled_distance'}
CLASSIFIERS.add('linear', LinearClassifier())


@dataclasses.dataclass
class FewRoundModel:
  """Backbone `ModelSpec` + classifier over `ways` class slots.

  Attributes:
    backbone: functional model whose output is the dense feature map.
    classifier_name: a `CLASSIFIERS` name: 'distance', 'scaled_distance' or 'linear'.
    ways: class slots (N, or the largest N of a random-way range).
    initial_weights: backbone weights then head weights (numpy).
  """
  backbone: ModelSpec
  classifier_name: str
  ways: int
  initial_weights: List[np.ndarray]

  @property
  def classifier(self):
    return CLASSIFIERS.get(self.classifier_name)

  @property
  def num_backbone(self) -> int:
    return len(self.backbone.initial_trainable)

  @property
  def feature_dim(self) -> int:
    return int(self.backbone.initial_trainable[-1].shape[-1])

  @property
  def weight_specs(self) -> List[tf.TensorSpec]:
    return [tf.TensorSpec(w.shape, tf.float32) for w in self.initial_weights]

  def dense(self, weights: Sequence[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
    """g(x): the last block's feature map [B, h, w, D]."""
    return self.backbone.logits(list(weights)[:self.num_backbone], x)

  @staticmethod
  def pool(dense: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(dense, axis=[1, 2])

  def embed(self, weights: Sequence[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
    """f(x) [B, D]: g(x) averaged over positions."""
    return self.pool(self.dense(weights, x))

  def with_classifier(self, classifier_name: str, ways: int, backbone_weights=None,
                      seed: int = 0) -> 'FewRoundModel':
    """This backbone (its initial or the given weights) with a fresh head.

    Fine-tuning via FedAvg replaces the pre-trained M-way layer this way.
    """
    body = [np.asarray(w, np.float32) for w in
            (backbone_weights if backbone_weights is not None
             else self.initial_weights[:self.num_backbone])]
    head = CLASSIFIERS.get(classifier_name).head(
        self.feature_dim, ways, np.random.default_rng(seed))
    return FewRoundModel(self.backbone, classifier_name, ways, body + head)


def build_few_round_model(backbone: str, element_shape: Sequence[int], classifier: str,
                          ways: int, seed: int = 0, **model_options) -> FewRoundModel:
  """A registered backbone (e.g. 'conv4') built with num_classes=0, plus a classifier head."""
  spec = build_model_spec(backbone, element_shape, 0, seed=seed, **model_options)
  probe = FewRoundModel(spec, classifier, ways, list(spec.initial_trainable))
  return probe.with_classifier(classifier, ways, seed=seed)
