"""The one federated round every algorithm shares.

    state --broadcast params--> clients --client work--> (update, weight, metrics)
          <--server optimizer-- mean of updates <--federated_sum--

An algorithm is its client work: a pure-TF function
`client_fn(params, data) -> (update, num_examples, metrics)` whose `update` has
the structure of `params` and is a (pseudo-)gradient: FedAvg's
theta - theta_local, FedMeta's meta-gradient (FedMeta Alg. 1, l. 17). The server
applies the weighted mean through a `tff.learning.optimizers` optimizer
(theta <- theta - (beta/m) sum_u g_u with SGD, FedMeta Alg. 1, l. 8).

A client whose update is not finite or that has no usable examples gets
weight 0 (counted in `num_rejected`); if all are rejected the state is kept.
One aggregation stage (one `federated_sum` of a struct), so the round compiles
to TFF's mergeable form for worker pools. `model_aggregator` (DP, secure
aggregation; `aggregation.py`), as in `tff.learning`'s builders, aggregates the
updates beside that sum, its state the server state's `aggregator`; None is
the mean, fused into the single sum (equal to `tff.aggregators.MeanFactory`).

Type signatures (P = params, D = one client's data, M = metrics, A = the
aggregator's state, only with a `model_aggregator`):
    initialize: ( -> <params=P,optimizer_state=O,round_num=int32[,aggregator=A]>@SERVER)
    next: (<state@SERVER, {D}@CLIENTS> -> <state@SERVER, M@SERVER>)
"""

from __future__ import annotations

import collections
import functools
import types
from typing import Callable, Mapping

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms import aggregation
from tff_meta.algorithms.base import FederatedProcess
from tff_meta.learning.inner_loop import all_finite

WEIGHTINGS = ('uniform', 'num_examples')
METRIC_NAMES = ('loss_sum', 'correct', 'num_examples')


def client_update_fn(client_fn: Callable, weighting: str, params, data, *,
                     premultiply: bool = True):
  """Pure TF: one client's contribution to the round's single `federated_sum`."""
  return contribution(weighting, *client_fn(params, data), premultiply=premultiply)


def contribution(weighting: str, update, num_examples, metrics, *, premultiply: bool = True):
  """Pure TF: weights one client's `client_fn` output for the sum, or rejects it.

  A rejected client (non-finite update or metrics, no usable examples) has
  weight 0 and `num_rejected` 1. With `premultiply` (the default mean) the
  update is multiplied by the weight, as `weighted_update`; otherwise (a
  `model_aggregator`, which weights itself) it is sent as is, as `update`,
  and a rejected client's is zeros.
  """
  weight = (tf.cast(num_examples, tf.float32) if weighting == 'num_examples'
            else tf.constant(1.0))
  finite = tf.logical_and(all_finite(update), all_finite(metrics))
  finite = tf.logical_and(finite, num_examples > 0)
  keep = tf.cast(finite, tf.float32)
  weight = weight * keep
  # tf.where, not multiplication: 0 * NaN is NaN.
  weighted = tf.nest.map_structure(
      lambda u: tf.where(finite, u * weight if premultiply else u, tf.zeros_like(u)), update)
  metrics = collections.OrderedDict(
      (k, tf.where(finite, tf.cast(metrics[k], tf.float32), 0.0)) for k in METRIC_NAMES)
  out = collections.OrderedDict()
  out['weighted_update' if premultiply else 'update'] = weighted
  out.update(weight=weight, metrics=metrics, num_clients=tf.constant(1.0),
             num_rejected=1.0 - keep)
  return out


def server_update_fn(server_optimizer, state, total):
  """Pure TF: the server step on the summed client contributions."""
  denominator = tf.maximum(total['weight'], 1e-12)
  mean_update = tf.nest.map_structure(lambda u: u / denominator, total['weighted_update'])
  return apply_update(server_optimizer, state, mean_update, total['weight'] > 0.0)


def apply_update(server_optimizer, state, mean_update, accepted):
  """Pure TF: the server optimizer's step on `mean_update`, kept unless `accepted` is false."""
  opt_state, params = server_optimizer.next(
      state['optimizer_state'], state['params'], mean_update)
  keep_old = lambda new, old: tf.where(accepted, new, old)
  new_state = collections.OrderedDict(
      params=tf.nest.map_structure(keep_old, params, state['params']),
      optimizer_state=tf.nest.map_structure(keep_old, opt_state, state['optimizer_state']),
      round_num=state['round_num'] + 1)
  return new_state


def check_weighting(weighting: str) -> None:
  if weighting not in WEIGHTINGS:
    raise ValueError(f'Unknown client weighting {weighting!r}; use one of {WEIGHTINGS}.')


def server_side(initial_params: Mapping[str, list], server_optimizer,
                model_aggregator=None) -> types.SimpleNamespace:
  """The server's half of a round, shared by the stateless and stateful processes.

  Returns a namespace with `params_type`, `state_type`, `initialize` (the
  federated computation), `get_params` (state -> params) and
  `aggregation_process` (`model_aggregator.create(...)` for the update, or
  None). With an aggregator the state has its state as `aggregator`.
  """
  initial_params = collections.OrderedDict(
      (k, [np.asarray(v, np.float32) for v in vs]) for k, vs in initial_params.items())
  params_spec = collections.OrderedDict(
      (k, [tf.TensorSpec(v.shape, tf.float32) for v in vs])
      for k, vs in initial_params.items())
  params_type = tff.types.tensorflow_to_type(params_spec)

  @tff.tensorflow.computation
  def server_init():
    params = tf.nest.map_structure(tf.constant, initial_params)
    return collections.OrderedDict(
        params=params,
        optimizer_state=server_optimizer.initialize(params_spec),
        round_num=tf.constant(0, tf.int32))

  state_type = server_init.type_signature.result
  agg_process = None
  if model_aggregator is not None:
    agg_process = (model_aggregator.create(params_type, tff.TensorType(np.float32))
                   if aggregation.is_weighted(model_aggregator)
                   else model_aggregator.create(params_type))

    aggregator_type = aggregation.with_dict_containers(
        agg_process.initialize.type_signature.result.member)

    @tff.tensorflow.computation(state_type, aggregator_type)
    def with_aggregator(core, aggregator_state):
      state = collections.OrderedDict(core)
      state['aggregator'] = aggregator_state
      return state

    state_type = with_aggregator.type_signature.result

  @tff.tensorflow.computation(state_type)
  def get_params(state):
    return state['params']

  @tff.federated_computation
  def initialize():
    core = tff.federated_eval(server_init, tff.SERVER)
    if agg_process is None:
      return core
    return tff.federated_map(with_aggregator, (core, agg_process.initialize()))

  return types.SimpleNamespace(
      params_type=params_type, state_type=state_type, initialize=initialize,
      get_params=get_params, aggregation_process=agg_process)


def round_metrics_computation(total_type):
  """(summed contributions or counts) -> the round's metrics."""

  @tff.tensorflow.computation(total_type)
  def round_metrics(total):
    metrics = collections.OrderedDict(total['metrics'])
    metrics['num_clients'] = total['num_clients']
    metrics['num_rejected'] = total['num_rejected']
    return metrics

  return round_metrics


def aggregation_side(server_optimizer, state_type, contribution_type):
  """`server_update` (state, summed contributions) and `round_metrics` computations."""

  @tff.tensorflow.computation(state_type, contribution_type)
  def server_update(state, total):
    return server_update_fn(server_optimizer, state, total)

  return server_update, round_metrics_computation(contribution_type)


COUNT_KEYS = ('weight', 'metrics', 'num_clients', 'num_rejected')


def aggregated_body(server, server_optimizer, model_aggregator, client_update, contribution_type):
  """The round's body with `model_aggregator` (module `aggregation`) for the update.

  The update goes through the aggregation process (with the weights for a
  weighted factory); the weights, metrics and counts through a parallel
  `federated_sum`. Under DP (`aggregation.is_private`) the server state
  depends on the clients only through the DP mean: the step is taken even
  if every client was rejected (their records are zeros).
  Returns `body(state, client_values, contributions) -> (state, outputs, metrics)`.
  """
  process = server.aggregation_process
  weighted = aggregation.is_weighted(model_aggregator)
  private = aggregation.is_private(model_aggregator)
  agg_state_type = server.state_type['aggregator']

  @tff.tensorflow.computation(contribution_type)
  def update_of(c):
    return c['update']

  @tff.tensorflow.computation(contribution_type)
  def weight_of(c):
    return c['weight']

  @tff.tensorflow.computation(contribution_type)
  def counts_of(c):
    return collections.OrderedDict((k, c[k]) for k in COUNT_KEYS)

  count_type = counts_of.type_signature.result

  @tff.tensorflow.computation(server.state_type)
  def aggregator_state_of(state):
    return state['aggregator']

  @tff.tensorflow.computation(server.state_type, server.params_type, agg_state_type, count_type)
  def server_update(state, mean_update, aggregator_state, counts):
    accepted = tf.constant(True) if private else counts['weight'] > 0.0
    new_state = apply_update(server_optimizer, state, mean_update, accepted)
    new_state['aggregator'] = aggregator_state
    return new_state

  round_metrics = round_metrics_computation(count_type)

  def body(state, client_values, contributions=lambda outputs: outputs):
    params = tff.federated_broadcast(tff.federated_map(server.get_params, state))
    outputs = tff.federated_map(client_update, (params,) + client_values)
    contribs = contributions(outputs)
    values = [tff.federated_map(update_of, contribs)]
    if weighted:
      values.append(tff.federated_map(weight_of, contribs))
    aggregated = process.next(tff.federated_map(aggregator_state_of, state), *values)
    counts = tff.federated_sum(tff.federated_map(counts_of, contribs))
    new_state = tff.federated_map(
        server_update, (state, aggregated.result, aggregated.state, counts))
    return new_state, outputs, tff.federated_map(round_metrics, counts)

  return body


def _client_update(client_work, params_type, client_state_type, data_type):
  """(client_update, contribution type, contribution_of, state_of) around `client_work`;
  the last two are None without client state."""
  if client_state_type is None:
    @tff.tensorflow.computation(params_type, data_type)
    def client_update(params, data):
      return client_work(params, data)

    return client_update, client_update.type_signature.result, None, None

  @tff.tensorflow.computation(params_type, client_state_type, data_type)
  def client_update(params, client_state, data):   # pylint: disable=function-redefined
    return client_work(params, client_state, data)

  output_type = client_update.type_signature.result

  @tff.tensorflow.computation(output_type)
  def contribution_of(output):
    return output[0]

  @tff.tensorflow.computation(output_type)
  def state_of(output):
    return output[1]

  return client_update, output_type[0], contribution_of, state_of


@aggregation.quiet_tracing
def build_round(
    *, initial_params: Mapping[str, list], client_work: Callable,
    client_data_spec: Mapping[str, tf.TensorSpec], server_optimizer, weighting: str,
    client_state_type=None, initial_client_state=None,
    model_aggregator=None) -> FederatedProcess:
  """The one round's `FederatedProcess`, with or without client state.

  Shared by `build_federated_process` and `stateful.build_stateful_process`.
  `client_work` is the pure-TF client step: `(params, data) -> contribution`
  or, with `client_state_type` (the type of one client's state, whose new
  clients start from `initial_client_state`), `(params, client_state, data)
  -> (contribution, new_client_state)`, exposed for plain-TF references. With
  a client state, `next` takes and returns it CLIENTS-placed:
      next: (<state@SERVER, {C}@CLIENTS, {D}@CLIENTS>
             -> <state@SERVER, {C}@CLIENTS, M@SERVER>)
  `model_aggregator` (a `tff.aggregators` factory, see `aggregation`; None =
  the weighted mean in the single `federated_sum`) aggregates the update;
  `client_work` must then send it unweighted (`premultiply=False`).
  `client_data_spec` is the spec (any nesting) of one CLIENTS value: the
  execution plan builds the same round with a group of clients per value
  this way (`runtime/grouped.py`).
  """
  check_weighting(weighting)
  aggregation.check_weighting(model_aggregator, weighting)
  server = server_side(initial_params, server_optimizer, model_aggregator)
  params_type, state_type = server.params_type, server.state_type
  data_type = tff.types.tensorflow_to_type(collections.OrderedDict(client_data_spec))
  at_server = lambda t: tff.FederatedType(t, tff.SERVER)
  at_clients = lambda t: tff.FederatedType(t, tff.CLIENTS)

  client_update, contribution_type, contribution_of, state_of = _client_update(
      client_work, params_type, client_state_type, data_type)

  get_params, initialize = server.get_params, server.initialize
  server_update = round_metrics = None   # with a model_aggregator, `aggregated_body`'s own
  if model_aggregator is None:
    server_update, round_metrics = aggregation_side(server_optimizer, state_type, contribution_type)

    def round_body(state, client_values, contributions=lambda outputs: outputs):
      """Traced in `next`: broadcast, client work, the single sum, the server step."""
      params = tff.federated_broadcast(tff.federated_map(get_params, state))
      outputs = tff.federated_map(client_update, (params,) + client_values)
      total = tff.federated_sum(contributions(outputs))
      return (tff.federated_map(server_update, (state, total)), outputs,
              tff.federated_map(round_metrics, total))
  else:
    round_body = aggregated_body(server, server_optimizer, model_aggregator, client_update,
                                 contribution_type)

  if client_state_type is None:
    @tff.federated_computation(at_server(state_type), at_clients(data_type))
    def next_fn(state, client_data):
      new_state, _, metrics = round_body(state, (client_data,))
      return new_state, metrics
  else:
    @tff.federated_computation(
        at_server(state_type), at_clients(client_state_type), at_clients(data_type))
    def next_fn(state, client_states, client_data):
      new_state, outputs, metrics = round_body(
          state, (client_states, client_data),
          lambda outputs: tff.federated_map(contribution_of, outputs))
      return new_state, tff.federated_map(state_of, outputs), metrics

  if model_aggregator is not None and aggregation.uses_secure_sum(next_fn):
    next_fn = aggregation.simulated(next_fn)
  return FederatedProcess(
      initialize, next_fn, get_model_weights=get_params, params_type=params_type,
      data_type=data_type, client_output_type=contribution_type, client_update=client_update,
      server_update=server_update, round_metrics=round_metrics, initial_params=initial_params,
      client_work=client_work, weighting=weighting,
      server_optimizer=server_optimizer, client_state_type=client_state_type,
      initial_client_state=initial_client_state, model_aggregator=model_aggregator)


def build_federated_process(
    *, initial_params: Mapping[str, list], client_fn: Callable,
    client_data_spec: Mapping[str, tf.TensorSpec], server_optimizer,
    weighting: str = 'uniform', model_aggregator=None) -> FederatedProcess:
  """Builds `initialize`/`next` around `client_fn`.

  Args:
    initial_params: OrderedDict of lists of numpy arrays (e.g. `weights`, and
      Meta-SGD's `rates`).
    client_fn: pure-TF `(params, data) -> (update, num_examples, metrics)`;
      `metrics` holds the sums in `METRIC_NAMES`; `num_examples == 0` marks
      a client that cannot contribute (it is rejected).
    client_data_spec: OrderedDict of `tf.TensorSpec` for one client's data.
    server_optimizer: a `tff.learning.optimizers.Optimizer`.
    weighting: 'uniform' (FedMeta Alg. 1) or 'num_examples' (FedAvg).
    model_aggregator: a `tff.aggregators` factory for the update (module
      `aggregation`); None = the weighted mean.
  """
  return build_round(
      initial_params=initial_params,
      client_work=functools.partial(client_update_fn, client_fn, weighting,
                                    premultiply=model_aggregator is None),
      client_data_spec=client_data_spec, server_optimizer=server_optimizer, weighting=weighting,
      model_aggregator=model_aggregator)
