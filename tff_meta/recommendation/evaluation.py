"""Adapt on each test user's support set, predict its query set, in TFF.

Chen et al. 2018b (Algorithm 1, meta-testing): a new user receives the
algorithm (theta, and Meta-SGD's alpha), trains its model on its support set
with the same inner SGD steps as in meta-training, and scores its query set.
NN(pre-trained) is evaluated the same way from the pre-trained weights (fine-
tuning with plain SGD at `inner_lr`). Unlike `evaluation.personalized`, which
returns summed accuracies, this returns each user's query predictions, which
ranking metrics (Precision@k, Top-k) need.

The adapter sees only the support tensors (no query labels are passed at all).

Type signature (P = params: <weights=[...][, rates=[...]]>):
    predict: (<P@SERVER, {<support_x, support_y, query_x>}@CLIENTS>
              -> {float32[?, K]}@CLIENTS)        K = 1 (ratings) or classes
"""

from __future__ import annotations

import collections
from typing import List, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.learning import inner_loop, losses


def params_type(params) -> tff.Type:
  """The TFF type of an OrderedDict of lists of float32 arrays."""
  return tff.types.tensorflow_to_type(collections.OrderedDict(
      (k, [tf.TensorSpec(np.shape(v), tf.float32) for v in vs]) for k, vs in params.items()))


def prediction_spec(model, y_dtype: tf.DType) -> collections.OrderedDict:
  return collections.OrderedDict(support_x=model.x_spec, support_y=tf.TensorSpec([None], y_dtype),
                                 query_x=model.x_spec)


def build_predict(model, params_type_: tff.Type, *, loss: losses.Loss, inner_lr: float,
                  steps: int) -> tff.Computation:
  """The federated computation in the module docstring."""
  data_type = tff.types.tensorflow_to_type(prediction_spec(model, loss.y_dtype))

  @tff.tensorflow.computation(params_type_, data_type)
  def client_predict(params, data):
    rates = params['rates'] if 'rates' in params else inner_lr
    support_loss = lambda w: loss.value(model.logits(w, data['support_x']), data['support_y'])
    adapted = inner_loop.sgd_adapt(support_loss, params['weights'], rates, steps,
                                   first_order=True)
    return model.logits(adapted, data['query_x'])

  @tff.federated_computation(tff.FederatedType(params_type_, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def predict(params, client_data):
    return tff.federated_map(client_predict, (tff.federated_broadcast(params), client_data))

  return predict


def prediction_inputs(episodes: Sequence) -> List[collections.OrderedDict]:
  """Client values for `predict` (support set and query features only)."""
  return [collections.OrderedDict(support_x=e.support_x, support_y=e.support_y,
                                  query_x=e.query_x) for e in episodes]
