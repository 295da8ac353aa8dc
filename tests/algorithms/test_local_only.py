"""Local-only training (FedEC Table 2 "Local Only") against plain-TF references."""

import collections

import numpy as np
import pytest

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, stateful

LR, EPOCHS, BATCH = 0.1, 2, 8
HP = Hparams(client_optimizer='sgd', client_lr=LR, local_epochs=EPOCHS, batch_size=BATCH)


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  return model, data, ALGORITHMS.get('local_only')(model, HP)


def _full(arrays):
  return collections.OrderedDict(x=arrays.x, y=arrays.y)


def test_client_trains_its_own_model_and_sends_zeros(tff_context, setup):
  model, data, alg = setup
  proc = alg.process
  own = helpers.perturbed(model.initial_trainable, 0)
  client = data.train[0].all
  out, new_state = proc.client_update(
      collections.OrderedDict(weights=model.initial_trainable),
      stateful.with_visits({'weights': own}), _full(client))
  expected = helpers.reference_minibatch_sgd(own, client.x, client.y, LR, EPOCHS, BATCH)
  helpers.assert_rel_close(new_state['weights'], expected, rtol=1e-5)
  assert new_state['visits'] == 1.0
  assert all(not np.any(u) for u in out['weighted_update']['weights'])
  assert out['weight'] == len(client.y) and out['metrics']['num_examples'] == len(client.y)


def test_states_persist_per_client_and_server_model_stays(tff_context, setup):
  model, data, alg = setup
  clients = [_full(data.train[i].all) for i in range(2)]
  states = helpers.check_states_follow_clients(alg.process, clients)
  assert np.max(np.abs(states[0]['weights'][0] - states[1]['weights'][0])) > 1e-4
  state = alg.process.initialize()
  state, _, metrics = alg.process.next(state, [alg.process.initial_client_state] * 2, clients)
  for w, w0 in zip(state['params']['weights'], model.initial_trainable):
    np.testing.assert_array_equal(w, w0)
  assert metrics['num_examples'] == sum(len(c['y']) for c in clients)
  assert metrics['num_clients'] == 2 and metrics['num_rejected'] == 0


def test_evaluation_known_own_model_new_trains_from_initial(tff_context, setup):
  model, data, alg = setup
  known, new = data.train[0], data.test[0]
  own = helpers.perturbed(model.initial_trainable, 1)
  states = [stateful.with_visits({'weights': own}), alg.process.initial_client_state]
  states[0]['visits'] = np.float32(3.0)
  params = collections.OrderedDict(weights=model.initial_trainable)
  candidates = stateful.stack_states([], 1, alg.process.initial_client_state)
  out = alg.evaluate(params, candidates, states, [helpers.episode(known), helpers.episode(new)])
  adapted = helpers.reference_minibatch_sgd(model.initial_trainable, new.support.x,
                                            new.support.y, LR, EPOCHS, BATCH)
  for result, weights, client in [(out[0], own, known), (out[1], adapted, new)]:
    helpers.assert_query_loss(result, weights, client)


def test_bad_input(setup):
  model, _, _ = setup
  with pytest.raises(ValueError, match='local_epochs >= 1'):
    ALGORITHMS.get('local_only')(model, Hparams(local_epochs=0))
