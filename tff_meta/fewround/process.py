"""Few-round learning meta-training as TFF computations (FRL Algorithm 1).

Park et al., "Few-Round Learning for Federated Learning", Sec. 3.2. One episode is 1 + R
communication rounds, each its own federated computation with a single
aggregation stage (so each compiles to TFF's mergeable form and runs on a
worker pool):

- `round` (Alg. 1 lines 5-21), run R times from theta_0 = phi: every client
  computes its prototypes P_r(k) from its *support set* with theta_r (Eq. 1),
  takes E SGD steps (rate alpha) on F = Eq. 2 + gamma * Eq. 3 (Eq. 4; the
  GPAL term only once global prototypes exist, r >= 1), and the server
  averages the models (line 18) and, class by class, the prototypes
  (line 20), both weighted by support-set size |S_k| (lambda_k). A class's
  prototype is averaged over the clients that hold that class.
- `meta_update` (lines 22-26): every client takes the query loss with theta_R
  and P_{R-1} and the first-order approximation
  grad_phi L(theta_R) ~ grad_theta_R L(theta_R) (Sec. 3.2.2); `hp.meta_update`
  names how phi_{t+1} follows (`meta_update.META_UPDATES`): `client_adam`, one
  Adam step (beta) per client from the shared state, then the server averages
  the phi_{t+1}(k) and the Adam slots weighted by data size |S_k| + |Q_k|
  (rho_k); or `server_adam`, one server Adam step on the rho-weighted mean
  meta-gradient. beta is divided by 10 from episode `server_lr_decay_episode`
  on (the paper: after 2.0e4 rounds = 5,000 episodes of 4 rounds).

Deployment (Sec. 3.3) runs `round` R times from theta_0 = phi_T and scores
the query sets with `evaluate`, by `hp.test_prototypes` (`TEST_PROTOTYPES`):
`previous`, the paper's rule, classifies with theta_R and P_{R-1} (computed at
theta_{R-1}, before round R - 1's local steps); `recomputed` first has the
clients upload P_R(k), Eq. 1 at theta_R on their support sets (`recompute`:
one more upload of N prototypes per client, no model exchange), and
classifies with theta_R and P_R, so the embedding and the prototypes come
from the same model.

`hp.train_prototypes` (`TRAIN_PROTOTYPES`) names the prototypes of the
meta-objective: `previous`, the paper's P_{R-1} (line 24); `recomputed`, P_R
from `recompute` between the R-th round and the meta-update, the prototypes
the deployment rule `recomputed` scores with (one more prototype upload per
episode).

With `local_adaptation=True` the meta-update is the personalization scheme of
Appendix C: each client first adapts phi on its own support set (E steps,
no aggregation) and takes the query loss with its own prototypes; used with
R = 0 at meta-training time.

`build_meta_training` returns a `FewRoundProcess` (`few_round_process.py`) whose
`next` chains the R `round`s and the `meta_update` in one computation, and
declares the pieces: `run_episode` calls them one by one (what worker pools need).

Type signatures: `few_round_process.py`.
"""

from __future__ import annotations

import collections
from typing import Mapping

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms.base import OPTIMIZERS
from tff_meta.fewround import meta_update as meta_lib
from tff_meta.fewround import prototypes as proto_lib
from tff_meta.fewround.few_round_process import (TEST_PROTOTYPES, TRAIN_PROTOTYPES, FewRoundHparams,
                                                 FewRoundProcess)
from tff_meta.fewround.model import ClientBatch, FewRoundModel
from tff_meta.learning import step_scale
from tff_meta.fewround.meta_update import META_UPDATES
from tff_meta.learning import inner_loop
from tff_meta.learning.inner_loop import all_finite


def data_spec(element_shape, x_dtype=tf.float32) -> 'collections.OrderedDict':
  """One client's episode data as a struct of tensors."""
  x = tf.TensorSpec([None, *element_shape], x_dtype)
  y = tf.TensorSpec([None], tf.int32)
  return collections.OrderedDict(support_x=x, support_y=y, query_x=x, query_y=y,
                                 num_ways=tf.TensorSpec([], tf.int32))


def client_batch(model: FewRoundModel, data, part: str) -> ClientBatch:
  mask = tf.sequence_mask(data['num_ways'], model.ways, dtype=tf.float32)
  return ClientBatch(data[f'{part}_x'], data[f'{part}_y'], mask)


def local_update(model: FewRoundModel, hp: FewRoundHparams, theta, batch: ClientBatch,
                 global_protos, global_mask, gamma):
  """E SGD steps on Eq. 4 (line 16); prototypes are recomputed at every step.

  The linear head's weights step with `head_lr` when it is set (> 0): its
  label slots are reassigned in every episode, so R * E small steps of the
  body's alpha leave a meta-learned head at chance (docs/RESULTS.md).
  """
  loss_fn = lambda w: model.classifier.local_loss(model, w, batch, global_protos,
                                                  global_mask, gamma)
  return inner_loop.sgd_adapt(loss_fn, theta, local_rates(model, hp), hp.local_steps)


def local_rates(model: FewRoundModel, hp: FewRoundHparams):
  """alpha for every weight, or per weight when the head has its own rate."""
  num_head = len(model.initial_weights) - model.num_backbone
  if hp.head_lr <= 0 or num_head == 0:
    return hp.inner_lr
  return [hp.inner_lr] * model.num_backbone + [hp.head_lr] * num_head


def round_client_fn(model: FewRoundModel, hp: FewRoundHparams, server, data):
  """Pure TF: one client's round. Prototypes use the support set only."""
  batch = client_batch(model, data, 'support')
  theta = list(server['theta'])
  gamma = hp.gamma * server['has_protos']
  local, counts = proto_lib.prototypes(model.embed(theta, batch.x), batch.y, model.ways)
  loss = model.classifier.local_loss(model, theta, batch, server['protos'], server['mask'],
                                     gamma)
  new_theta = local_update(model, hp, theta, batch, server['protos'], server['mask'], gamma)
  n = tf.cast(tf.size(batch.y), tf.float32)
  ok = tf.logical_and(all_finite(new_theta), tf.math.is_finite(loss))
  weight = tf.where(ok, n, 0.0)                                        # lambda_k ~ |S_k|
  out = collections.OrderedDict(
      theta=[tf.where(ok, w * weight, tf.zeros_like(w)) for w in new_theta], weight=weight)
  out.update(_weighted_prototypes(ok, weight, local, counts))
  out.update(loss_sum=tf.where(ok, loss * n, 0.0), num_examples=weight)
  return out


def _weighted_prototypes(ok, weight, local, counts):
  """A client's share of line 20: lambda_k P^c(k) and lambda_k for each class it holds."""
  class_weight = weight * tf.cast(counts > 0, tf.float32)              # [ways]
  return collections.OrderedDict(
      protos=tf.where(ok, local * class_weight[:, tf.newaxis], tf.zeros_like(local)),
      class_weight=class_weight)


def _global_prototypes(total):
  """Line 20: per class, the lambda-weighted mean over the clients holding it; its mask."""
  protos = total['protos'] / tf.maximum(total['class_weight'], 1e-12)[:, tf.newaxis]
  return protos, tf.cast(total['class_weight'] > 0, tf.float32)


def round_server_fn(old, total):
  """Pure TF: lines 18 and 20, support-size weighted means (old model if none)."""
  denominator = tf.maximum(total['weight'], 1e-12)
  theta = [tf.where(total['weight'] > 0, w / denominator, o)
           for w, o in zip(total['theta'], old['theta'])]
  protos, mask = _global_prototypes(total)
  return collections.OrderedDict(theta=theta, protos=protos, mask=mask,
                                 has_protos=tf.constant(1.0))


def prototype_client_fn(model: FewRoundModel, server, data):
  """Pure TF: Eq. 1 at the server's theta on the client's support set, weighted as in line 20.

  After round R this is P_R(k) at theta_R: what round R + 1 would compute
  first, without its local steps.
  """
  batch = client_batch(model, data, 'support')
  local, counts = proto_lib.prototypes(model.embed(list(server['theta']), batch.x), batch.y,
                                       model.ways)
  ok = tf.reduce_all(tf.math.is_finite(local))
  weight = tf.where(ok, tf.cast(tf.size(batch.y), tf.float32), 0.0)
  return _weighted_prototypes(ok, weight, local, counts)


def prototype_server_fn(old, total):
  """Pure TF: the round state `old` with its prototypes replaced by the new global ones."""
  protos, mask = _global_prototypes(total)
  return collections.OrderedDict(theta=list(old['theta']), protos=protos, mask=mask,
                                 has_protos=tf.constant(1.0))


# How `evaluate` scores the query sets after R rounds (deployment only; meta-training's query
# loss uses what `train_prototypes` names, TRAIN_PROTOTYPES below). Each entry maps (evaluate, recompute) to
# the evaluation: `recompute(state, data)` is the federated computation returning `state`
# with P_R, the global prototypes at theta_R.
TEST_PROTOTYPES.add('previous', lambda evaluate, recompute: evaluate)
TEST_PROTOTYPES.add('recomputed', lambda evaluate, recompute: (
    lambda state, data: evaluate(recompute(state, data), data)))


# The prototypes of meta-training's query loss (Alg. 1 line 24). Each entry maps a builder of
# `recompute` to the step between the R-th round and the meta-update, `refresh(state, data)`:
# `previous` keeps the round state's P_{R-1} (the paper; nothing is built or sent);
# `recomputed` replaces them by P_R, the global prototypes at theta_R, as the deployment rule
# `recomputed` scores with (one more prototype upload per episode).
TRAIN_PROTOTYPES.add('previous', lambda build_recompute: lambda state, data: state)
TRAIN_PROTOTYPES.add('recomputed', lambda build_recompute: build_recompute())


def meta_client_fn(model: FewRoundModel, hp: FewRoundHparams, optimizer, server, data):
  """Pure TF: line 24 as `hp.meta_update` does it (`meta_update.META_UPDATES`)."""
  return META_UPDATES.get(hp.meta_update).client_fn(model, hp, optimizer, server, data,
                                                    local_update, client_batch)


def meta_server_fn(hp: FewRoundHparams, optimizer, state, total):
  """Pure TF: line 26 as `hp.meta_update` does it."""
  return META_UPDATES.get(hp.meta_update).server_fn(hp, optimizer, state, total)


def fresh_round_state(model: FewRoundModel, weights, zero_head: bool = False):
  """theta_0 = the given weights; no global prototypes yet (round 0).

  With `zero_head` the linear head starts at zero in every episode, so its
  first steps fit the episode's own label slots (the "zero trick" for
  permuted labels); the body is phi's. Other heads (the scaled distance's
  temperature) are never zeroed.
  """
  theta = list(weights)
  if zero_head and model.classifier.zero_head_allowed:
    theta = theta[:model.num_backbone] + [tf.zeros_like(w) for w in theta[model.num_backbone:]]
  return collections.OrderedDict(
      theta=theta, protos=tf.zeros([model.ways, model.feature_dim]),
      mask=tf.zeros([model.ways]), has_protos=tf.constant(0.0))


def _sums(total, keys):
  return collections.OrderedDict((k, total[k]) for k in keys)


def build_round(model: FewRoundModel, hp: FewRoundHparams, client_data_spec: Mapping):
  """The round computations for `model`: (start_from_weights, round, evaluate).

  Shared by meta-training, deployment and the baselines (pre-training and
  test-time FedAvg are rounds of a linear model). `evaluate(state, data)`
  scores with the prototypes `hp.test_prototypes` names (`TEST_PROTOTYPES`).
  """
  weights_spec = model.weight_specs
  data_type = tff.types.tensorflow_to_type(collections.OrderedDict(client_data_spec))

  @tff.tensorflow.computation(tff.types.tensorflow_to_type(weights_spec))
  def start(weights):
    return fresh_round_state(model, weights, hp.zero_head)

  round_type = start.type_signature.result

  @tff.tensorflow.computation(round_type, data_type)
  def round_client(server, data):
    return round_client_fn(model, hp, server, data)

  @tff.tensorflow.computation(round_type, round_client.type_signature.result)
  def round_server(old, total):
    return round_server_fn(old, total)

  @tff.tensorflow.computation(round_client.type_signature.result)
  def round_metrics(total):
    return _sums(total, ('loss_sum', 'num_examples'))

  @tff.federated_computation(tff.FederatedType(round_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def round_fn(server, data):
    outputs = tff.federated_map(round_client, (tff.federated_broadcast(server), data))
    total = tff.federated_sum(outputs)
    return (tff.federated_map(round_server, (server, total)),
            tff.federated_map(round_metrics, total))

  @tff.tensorflow.computation(round_type, data_type)
  def eval_client(server, data):
    query = client_batch(model, data, 'query')
    logits = model.classifier.logits(model, list(server['theta']), query.x, query.way_mask,
                                     server['protos'], server['mask'])
    predictions = tf.argmax(logits, -1, output_type=tf.int32)
    return collections.OrderedDict(
        loss_sum=tf.reduce_sum(proto_lib.per_example_loss(logits, query.y)),
        correct=tf.reduce_sum(tf.cast(tf.equal(predictions, query.y), tf.float32)),
        num_examples=tf.cast(tf.size(query.y), tf.float32))

  @tff.federated_computation(tff.FederatedType(round_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def evaluate(server, data):
    """Query accuracy with the state's theta and prototypes (Sec. 3.3), summed over clients."""
    return tff.federated_sum(tff.federated_map(eval_client, (tff.federated_broadcast(server), data)))

  recompute = build_recompute(model, round_type, data_type)
  return start, round_fn, TEST_PROTOTYPES.get(hp.test_prototypes)(evaluate, recompute)


def build_recompute(model: FewRoundModel, round_type, data_type):
  """recompute: (<G@SERVER, {D}@CLIENTS> -> G@SERVER), G's prototypes at G's theta."""

  @tff.tensorflow.computation(round_type, data_type)
  def prototype_client(server, data):
    return prototype_client_fn(model, server, data)

  @tff.tensorflow.computation(round_type, prototype_client.type_signature.result)
  def prototype_server(old, total):
    return prototype_server_fn(old, total)

  @tff.federated_computation(tff.FederatedType(round_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def recompute(server, data):
    """The state with P at its own theta: clients upload Eq. 1 on their support sets."""
    outputs = tff.federated_map(prototype_client, (tff.federated_broadcast(server), data))
    return tff.federated_map(prototype_server, (server, tff.federated_sum(outputs)))

  return recompute


def build_meta_training(model: FewRoundModel, hp: FewRoundHparams, client_data_spec: Mapping,
                        round_computations=None) -> FewRoundProcess:
  """The FRL meta-training process (one `next` = one episode of 1 + R rounds).

  `round_computations`: `build_round(model, hp, client_data_spec)` when the caller traced it
  already (`baselines.Context.round_computations`: the test reuses the same trace).
  """
  num_head = len(model.initial_weights) - model.num_backbone
  optimizer = step_scale.scaled(OPTIMIZERS.get(hp.server_optimizer)(hp.server_lr),
                                [1.0] * model.num_backbone + [hp.head_meta_lr_scale] * num_head)
  weights_spec = model.weight_specs
  initial = [np.asarray(w, np.float32) for w in model.initial_weights]
  data_type = tff.types.tensorflow_to_type(collections.OrderedDict(client_data_spec))
  start_weights, round_fn, evaluate = (round_computations
                                       or build_round(model, hp, client_data_spec))

  @tff.tensorflow.computation
  def server_init():
    return collections.OrderedDict(
        phi=[tf.constant(w) for w in initial],
        optimizer_state=optimizer.initialize(weights_spec),
        episode=tf.constant(0, tf.int32))

  state_type = server_init.type_signature.result
  round_type = start_weights.type_signature.result
  refresh = TRAIN_PROTOTYPES.get(hp.train_prototypes)(
      lambda: build_recompute(model, round_type, data_type))

  @tff.tensorflow.computation(state_type)
  def start(state):
    return fresh_round_state(model, state['phi'], hp.zero_head)

  @tff.tensorflow.computation(state_type, round_type)
  def meta_broadcast(state, round_state):
    return collections.OrderedDict(
        phi=state['phi'], optimizer_state=state['optimizer_state'],
        meta_lr=meta_lib.meta_lr(hp, state['episode']), round=round_state)

  @tff.tensorflow.computation(meta_broadcast.type_signature.result, data_type)
  def meta_client(server, data):
    return meta_client_fn(model, hp, optimizer, server, data)

  @tff.tensorflow.computation(state_type, meta_client.type_signature.result)
  def meta_server(state, total):
    return meta_server_fn(hp, optimizer, state, total)

  @tff.tensorflow.computation(meta_client.type_signature.result)
  def meta_metrics(total):
    return _sums(total, ('loss_sum', 'correct', 'num_examples'))

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(round_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def meta_update(state, round_state, data):
    server = tff.federated_map(meta_broadcast, (state, round_state))
    outputs = tff.federated_map(meta_client, (tff.federated_broadcast(server), data))
    total = tff.federated_sum(outputs)
    return (tff.federated_map(meta_server, (state, total)),
            tff.federated_map(meta_metrics, total))

  @tff.federated_computation
  def initialize():
    return tff.federated_eval(server_init, tff.SERVER)

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, data):
    round_state = tff.federated_map(start, state)
    for _ in range(hp.rounds):
      round_state, _ = round_fn(round_state, data)
    return meta_update(state, refresh(round_state, data), data)

  return FewRoundProcess(initialize, next_fn, start=start, round_fn=round_fn,
                         meta_update=meta_update, refresh=refresh, evaluate=evaluate,
                         start_weights=start_weights, hparams=hp, model=model)


def run_episode(process, state, data, round_metrics=None):
  """One episode, one federated computation per communication round (worker pools).

  Each round's metrics (support loss sums) are appended to `round_metrics`
  when a list is given.
  """
  round_state = process.start(state)
  for _ in range(process.hparams.rounds):
    round_state, metrics = process.round(round_state, data)
    if round_metrics is not None:
      round_metrics.append(metrics)
  return process.meta_update(state, process.refresh(round_state, data), data)
