"""The typed process every builder returns (issue #17): LearningProcess-like
`initialize`/`next`/`get_model_weights`, declared types and client state, the
server step, and nothing about execution (`runtime/execution_plan.py`)."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms import aggregation, process, stateful
from tff_meta.algorithms.base import FederatedProcess

SGD = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
DIM = 3
SPEC = collections.OrderedDict(u=tf.TensorSpec([DIM], tf.float32))
PARAMS = collections.OrderedDict(weights=[np.zeros(DIM, np.float32)])


def _metrics():
  return collections.OrderedDict((k, tf.constant(0.0)) for k in process.METRIC_NAMES)


def _echo(params, data):
  """The client sends its `u` as the update."""
  del params
  return collections.OrderedDict(weights=[data['u']]), tf.constant(1), _metrics()


def _echo_with_state(params, client_state, data):
  update, n, metrics = _echo(params, data)
  return update, n, metrics, collections.OrderedDict(last=data['u'])


def _plain(model_aggregator=None):
  return process.build_federated_process(initial_params=PARAMS, client_fn=_echo,
                                         client_data_spec=SPEC, server_optimizer=SGD,
                                         model_aggregator=model_aggregator)


def _with_state():
  return stateful.build_stateful_process(
      initial_params=PARAMS,
      initial_client_state=stateful.with_visits({'last': np.zeros(DIM, np.float32)}),
      client_fn=_echo_with_state, client_data_spec=SPEC, server_optimizer=SGD)


def test_plain_process_declares_its_parts(tff_context):
  proc = _plain()
  assert isinstance(proc, FederatedProcess) and isinstance(proc, tff.templates.IterativeProcess)
  assert not proc.stateful and proc.client_state_type is None and proc.initial_client_state is None
  assert proc.model_aggregator is None and proc.weighting == 'uniform'
  assert proc.client_work.func is process.client_update_fn and proc.client_work.args[0] is _echo
  assert proc.server_optimizer is SGD
  assert proc.get_model_weights.type_signature.parameter == proc.state_type.member
  assert proc.get_model_weights.type_signature.result == proc.params_type
  assert proc.data_type == tff.types.tensorflow_to_type(SPEC)
  assert proc.client_update.type_signature.result == proc.client_output_type
  # The server step and the metrics, on the sum of client_update's results.
  assert proc.server_update.type_signature.parameter[0] == proc.state_type.member
  assert proc.server_update.type_signature.parameter[1] == proc.client_output_type
  assert proc.round_metrics.type_signature.parameter == proc.client_output_type
  assert proc.initial_params is PARAMS and callable(proc.client_work)
  # Nothing about execution (clients per call, resident state): runtime/execution_plan.py.
  assert not {'pieces', 'is_grouped', 'steps_in_place', 'grouped'} & set(dir(proc))
  # next's signature: the stateless round (module docstring).
  assert proc.next.type_signature.parameter[1] == tff.FederatedType(proc.data_type, tff.CLIENTS)
  state = proc.initialize()
  u = [np.array([1.0, 2.0, 3.0], np.float32), np.array([3.0, 2.0, 1.0], np.float32)]
  state, _ = proc.next(state, [collections.OrderedDict(u=x) for x in u])
  weights = proc.get_model_weights(state)
  np.testing.assert_allclose(weights['weights'][0], -(u[0] + u[1]) / 2)   # SGD at 1 on the mean
  np.testing.assert_allclose(weights['weights'][0], state['params']['weights'][0])


def test_process_with_client_state_declares_its_type():
  proc = _with_state()
  assert proc.stateful
  assert list(proc.initial_client_state) == ['visits', 'last']
  assert proc.client_state_type == tff.types.tensorflow_to_type(collections.OrderedDict(
      visits=tf.TensorSpec([], tf.float32), last=tf.TensorSpec([DIM], tf.float32)))
  assert proc.next.type_signature.parameter[1] == tff.FederatedType(proc.client_state_type,
                                                                    tff.CLIENTS)


@pytest.mark.slow
def test_a_model_aggregator_takes_the_update_instead_of_the_server_step():
  factory = aggregation.dp_factory(noise_multiplier=1.0, clients_per_round=2, clip=1.0)
  proc = _plain(factory)
  assert proc.model_aggregator is factory and not proc.stateful
  assert proc.server_update is None and proc.round_metrics is None


def test_client_state_type_and_initial_state_go_together():
  proc = _plain()
  with pytest.raises(ValueError, match='go together'):
    FederatedProcess(proc.initialize, proc.next, get_model_weights=proc.get_model_weights,
                     params_type=proc.params_type, data_type=proc.data_type,
                     client_output_type=proc.client_output_type,
                     client_update=proc.client_update, server_update=proc.server_update,
                     round_metrics=proc.round_metrics, initial_params=PARAMS,
                     client_work=proc.client_work, weighting='uniform', server_optimizer=SGD,
                     client_state_type=proc.params_type)
