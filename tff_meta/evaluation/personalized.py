"""Personalized evaluation: adapt on each test client's support set, score its query set.

FedMeta (Chen et al. 2018) Sec. 4.1 and Appendix A.2: every method is scored on
the query sets of held-out clients; FedAvg(Meta) and FedMeta first adapt on
the support set; accuracy is reported over all data points (sum of correct /
sum of examples), with per-client accuracies for the fairness view (Fig. 2).

The adapter receives the support tensors only, so query data cannot leak into
adaptation.

Memory stays bounded by a slice of examples, whatever a client's size
(`learning.inner_loop`): the full-batch support steps accumulate their gradient
slice by slice (`adapt_on_support`), and the query set is scored slice by
slice (`score`); both give the full-batch results up to float rounding.

Type signature:
    evaluate: (<params@SERVER, {<support_x,support_y,query_x,query_y>}@CLIENTS>
               -> {<loss_sum=float32,correct=float32,num_examples=float32>}@CLIENTS)
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, List, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.learning import inner_loop, losses

# (params, support_x, support_y) -> adapted trainable weights.
Adapter = Callable[[collections.OrderedDict, tf.Tensor, tf.Tensor], List[tf.Tensor]]


def no_adaptation(params, support_x, support_y):
  del support_x, support_y
  return list(params['weights'])


def rates_of(params, default):
  """Meta-SGD's learned per-parameter rates when `params` holds them, else `default` (alpha)."""
  return params['rates'] if 'rates' in params else default


def adapt_on_support(model, weights, rates, steps: int, support_x, support_y,
                     loss: losses.Loss = losses.CROSS_ENTROPY):
  """`steps` first-order full-batch SGD steps from `weights` on the support loss (MAML's
  inner loop at evaluation; FedMeta Alg. 1, l. 13), the gradient summed over slices."""
  slice_loss = lambda w, x, y: loss.value(model.logits(w, x), y)
  gradient = lambda w: inner_loop.mean_gradient(slice_loss, w, support_x, support_y)
  return inner_loop.descend(gradient, weights, rates, steps)


def score(model, weights, x, y):
  """`losses.batch_stats` of the whole set (x, y) under `weights`, slice by slice."""
  return inner_loop.sliced_stats(lambda xs, ys: losses.batch_stats(model.logits(weights, xs), ys), x, y)


def sgd_adapter(model, rate, steps: int) -> Adapter:
  """The MAML evaluation adapter: `steps` first-order steps from `params['weights']` on
  the support set at `rates_of(params, rate)`."""

  def adapter(params, support_x, support_y):
    return adapt_on_support(model, params['weights'], rates_of(params, rate), steps,
                            support_x, support_y)

  return adapter


def episode_spec(model, y_dtype: tf.DType = tf.int32) -> collections.OrderedDict:
  """Support/query tensors of one client; `y_dtype` float32 for ratings (`losses.Loss`)."""
  return collections.OrderedDict(
      support_x=model.x_spec, support_y=tf.TensorSpec([None], y_dtype),
      query_x=model.x_spec, query_y=tf.TensorSpec([None], y_dtype))


def build_personalized_evaluation(model, params_type: tff.Type, adapter: Adapter):
  """Returns the federated evaluation computation (see module docstring)."""
  data_type = tff.types.tensorflow_to_type(episode_spec(model))

  @tff.tensorflow.computation(params_type, data_type)
  def client_eval(params, data):
    weights = adapter(params, data['support_x'], data['support_y'])
    return score(model, weights, data['query_x'], data['query_y'])

  @tff.federated_computation(
      tff.FederatedType(params_type, tff.SERVER), tff.FederatedType(data_type, tff.CLIENTS))
  def evaluate(params, client_data):
    return tff.federated_map(client_eval, (tff.federated_broadcast(params), client_data))

  return evaluate


@dataclasses.dataclass
class EvalSummary:
  """Accuracy over all query points, plus the per-client distribution."""
  accuracy: float
  loss: float
  num_examples: int
  client_accuracies: np.ndarray

  @property
  def client_mean(self) -> float:
    return float(np.mean(self.client_accuracies)) if self.client_accuracies.size else float('nan')

  @property
  def client_std(self) -> float:
    return float(np.std(self.client_accuracies)) if self.client_accuracies.size else float('nan')


def summarize(per_client: Sequence[dict]) -> EvalSummary:
  correct = np.array([float(m['correct']) for m in per_client])
  counts = np.array([float(m['num_examples']) for m in per_client])
  loss = np.array([float(m['loss_sum']) for m in per_client])
  total = counts.sum()
  if total <= 0:
    raise ValueError('Evaluation saw no query examples; check the test clients and support fraction.')
  with np.errstate(invalid='ignore', divide='ignore'):
    per = np.where(counts > 0, correct / np.maximum(counts, 1), np.nan)
  return EvalSummary(accuracy=float(correct.sum() / total), loss=float(loss.sum() / total),
                     num_examples=int(total), client_accuracies=per[~np.isnan(per)])
