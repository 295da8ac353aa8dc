"""The shared round, for algorithms whose clients keep state between rounds.

Some methods keep something on each client across the rounds it takes part
in: FedEC's historical adapted model θ̂_i (FedEC Alg. 1, l. 18), FedPer's /
FedRep's personal head, LG-FedAvg's local representation, SCAFFOLD's control
variate c_i, Ditto's and APFL's personal models. In simulation that state is a
CLIENTS-placed value that enters the round and comes back updated:

    next(state@SERVER, client_states@CLIENTS, data@CLIENTS)
      -> <state@SERVER, client_states'@CLIENTS, metrics@SERVER>

Everything else is the stateless round of `process.py`, reused (one builder,
`process.build_round`, makes both processes): the client's
(update, num_examples, metrics) go through the same `contribution`
(weighting, rejection of non-finite updates) and `server_update_fn`. A
rejected client keeps its old state. Every client state has a `visits` count
(how many accepted rounds it took part in), so a method can tell a client's
first participation (FedEC turns its constraint off then, Eq. 6).

The program (`tff_meta.classification.client_states.ClientStateStore`) keys the
states by client id, creates a client's state from `initial_client_state` on
its first participation, and checkpoints them with the server state. On real
devices the same value is what the device keeps on its own disk between
rounds; only `update` ever leaves it.

Type signatures (P = params, C = one client's state, D = one client's data):
    initialize: ( -> <params=P,optimizer_state=O,round_num=int32>@SERVER)
    next: (<state@SERVER, {C}@CLIENTS, {D}@CLIENTS>
           -> <state@SERVER, {C}@CLIENTS, M@SERVER>)
    evaluate: (<P@SERVER, K@SERVER, {C}@CLIENTS, {E}@CLIENTS> -> {M}@CLIENTS)
      with K = a stack of stored client states (new clients may choose among
      them, LG-FedAvg style) and E = <support_x,support_y,query_x,query_y>.
"""

from __future__ import annotations

import collections
import functools
from typing import Callable, Mapping

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms import process


def _as_float32(structure):
  return tf.nest.map_structure(lambda v: np.asarray(v, np.float32), structure)


def _spec(structure):
  return tf.nest.map_structure(lambda v: tf.TensorSpec(np.shape(v), tf.float32), structure)


def with_visits(personal: Mapping) -> collections.OrderedDict:
  """A client state: the method's parts plus the participation count."""
  state = collections.OrderedDict(visits=np.float32(0.0))
  state.update(personal)
  return state


def client_update_fn(client_fn: Callable, weighting: str, params, client_state, data, *,
                     premultiply: bool = True):
  """Pure TF: one client's contribution and its next state."""
  update, num_examples, metrics, new_state = client_fn(params, client_state, data)
  out = process.contribution(weighting, update, num_examples, metrics, premultiply=premultiply)
  accepted = out['num_rejected'] < 0.5
  new_state = collections.OrderedDict(new_state)
  new_state['visits'] = client_state['visits'] + 1.0
  new_state = tf.nest.map_structure(
      lambda new, old: tf.where(accepted, tf.cast(new, tf.float32), old),
      collections.OrderedDict((k, new_state[k]) for k in client_state), client_state)
  return out, new_state


def build_stateful_process(
    *, initial_params: Mapping[str, list], initial_client_state: Mapping,
    client_fn: Callable, client_data_spec: Mapping[str, tf.TensorSpec], server_optimizer,
    weighting: str = 'uniform', model_aggregator=None) -> process.FederatedProcess:
  """Builds the stateful round around `client_fn`.

  Args:
    initial_params: OrderedDict of lists of numpy arrays (the server's part).
    initial_client_state: OrderedDict (made by `with_visits`) of a new
      client's state; numpy arrays or lists of them.
    client_fn: pure TF `(params, client_state, data) -> (update, num_examples,
      metrics, new_client_state)`; see `process.build_federated_process`.
    client_data_spec, server_optimizer, weighting, model_aggregator: as in
      `process.build_federated_process` (the aggregator sees the update only:
      the client state never leaves the client).
  """
  process.check_weighting(weighting)
  if 'visits' not in initial_client_state:
    raise ValueError('initial_client_state needs a `visits` entry; build it with with_visits().')
  initial_client_state = _as_float32(collections.OrderedDict(initial_client_state))
  proc = process.build_round(
      initial_params=initial_params,
      client_work=functools.partial(client_update_fn, client_fn, weighting,
                                    premultiply=model_aggregator is None),
      client_data_spec=client_data_spec, server_optimizer=server_optimizer, weighting=weighting,
      client_state_type=tff.types.tensorflow_to_type(_spec(initial_client_state)),
      initial_client_state=initial_client_state, model_aggregator=model_aggregator)
  return proc


# (params, candidates, client_state, support_x, support_y) -> full model weights
Personalizer = Callable


def stack_states(states, count: int, initial) -> collections.OrderedDict:
  """`count` client states stacked on a new leading axis (padded with `initial`)."""
  states = list(states)[:count]
  states += [initial] * (count - len(states))
  return tf.nest.map_structure(lambda *xs: np.stack([np.asarray(x, np.float32) for x in xs]),
                               *states)


def build_stateful_evaluation(model, proc, personalize: Personalizer, num_candidates: int):
  """Personalized evaluation with client states (see module docstring).

  `personalize` gets the support tensors only, so query data cannot leak
  into the model it builds.
  """
  from tff_meta.evaluation import personalized  # pylint: disable=g-import-not-at-top
  data_type = tff.types.tensorflow_to_type(personalized.episode_spec(model))
  candidates_type = tff.types.tensorflow_to_type(tf.nest.map_structure(
      lambda v: tf.TensorSpec((num_candidates,) + np.shape(v), tf.float32),
      proc.initial_client_state))

  @tff.tensorflow.computation(proc.params_type, candidates_type, proc.client_state_type, data_type)
  def client_eval(params, candidates, client_state, data):
    weights = personalize(params, candidates, client_state, data['support_x'], data['support_y'])
    return personalized.score(model, weights, data['query_x'], data['query_y'])

  @tff.federated_computation(
      tff.FederatedType(proc.params_type, tff.SERVER),
      tff.FederatedType(candidates_type, tff.SERVER),
      tff.FederatedType(proc.client_state_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS))
  def evaluate(params, candidates, client_states, client_data):
    return tff.federated_map(client_eval, (
        tff.federated_broadcast(params), tff.federated_broadcast(candidates),
        client_states, client_data))

  return evaluate
