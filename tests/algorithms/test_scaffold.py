"""SCAFFOLD (Karimireddy et al. 2020, Alg. 1, option II) against plain-TF references."""

import collections
import math

import numpy as np
import pytest

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, stateful

LR, SERVER_LR, EPOCHS, BATCH, N, S = 0.1, 0.5, 2, 8, 10, 2
HP = Hparams(client_optimizer='sgd', client_lr=LR, fedavg_server_lr=SERVER_LR,
             local_epochs=EPOCHS, batch_size=BATCH, population=N, sampled_clients=S)


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  return model, data, ALGORITHMS.get('scaffold')(model, HP)


def reference_client(x, c, c_i, data):
  """Alg. 1 ll. 9-12: corrected SGD steps, then option II; returns (y, c_i+)."""
  corrected = lambda w, bx, by: [g - ci + cc for g, ci, cc in
                                 zip(helpers.loss_grad(w, bx, by), c_i, c)]
  y = helpers.reference_minibatch_sgd(x, data['x'], data['y'], LR, EPOCHS, BATCH, corrected)
  k = EPOCHS * math.ceil(len(data['y']) / BATCH)
  return y, [ci - cc + (a - b) / (k * LR) for ci, cc, a, b in zip(c_i, c, x, y)]


def _full(client):
  return collections.OrderedDict(x=client.all.x, y=client.all.y)


@pytest.mark.slow
def test_client_update_and_new_control_variate(tff_context, setup):
  model, data, alg = setup
  x = model.initial_trainable
  c, c_i = helpers.perturbed(x, 0, offset=False), helpers.perturbed(x, 1, offset=False)
  d = _full(data.train[0])
  out, new_state = alg.process.client_update(
      collections.OrderedDict(weights=x, control=c), stateful.with_visits({'control': c_i}), d)
  y, new_c_i = reference_client(x, c, c_i, d)
  assert out['weight'] == 1.0   # uniform, as Alg. 1
  helpers.assert_rel_close(out['weighted_update']['weights'],
                           [a - b for a, b in zip(x, y)], rtol=1e-4)
  helpers.assert_rel_close(new_state['control'], new_c_i, rtol=1e-4)
  helpers.assert_rel_close(out['weighted_update']['control'],
                           [-(S / N) / SERVER_LR * (a - b) for a, b in zip(new_c_i, c_i)],
                           rtol=1e-4)


@pytest.mark.slow
def test_server_step_follows_alg1(tff_context, setup):
  model, data, alg = setup
  proc = alg.process
  clients = [_full(data.train[i]) for i in range(2)]
  state = proc.initialize()
  x = model.initial_trainable
  c = [np.zeros_like(w) for w in x]
  own = [helpers.perturbed(x, 2, offset=False), helpers.perturbed(x, 3, offset=False)]
  new_state, new_client_states, metrics = proc.next(
      state, [stateful.with_visits({'control': o}) for o in own], clients)
  refs = [reference_client(x, c, o, d) for o, d in zip(own, clients)]
  # x <- x + eta_g mean(y_i - x); c <- c + (|S|/N) mean(c_i+ - c_i)
  expected_x = [w + SERVER_LR * np.mean([r[0][j] - w for r in refs], axis=0)
                for j, w in enumerate(x)]
  expected_c = [cc + S / N * np.mean([r[1][j] - o[j] for r, o in zip(refs, own)], axis=0)
                for j, cc in enumerate(c)]
  helpers.assert_rel_close(new_state['params']['weights'], expected_x, rtol=1e-4)
  helpers.assert_rel_close(new_state['params']['control'], expected_c, rtol=1e-4)
  for got, ref in zip(new_client_states, refs):
    helpers.assert_rel_close(got['control'], ref[1], rtol=1e-4)
  assert metrics['num_clients'] == 2 and metrics['num_rejected'] == 0


@pytest.mark.slow
def test_control_variates_persist_per_client(tff_context, setup):
  _, data, alg = setup
  states = helpers.check_states_follow_clients(alg.process, [_full(data.train[i]) for i in range(2)])
  assert np.max(np.abs(states[0]['control'][0] - states[1]['control'][0])) > 1e-6


def test_evaluation_scores_the_global_model(tff_context, setup):
  model, data, alg = setup
  client = data.test[0]
  x = helpers.perturbed(model.initial_trainable, 4)
  params = collections.OrderedDict(weights=x, control=helpers.perturbed(x, 5, offset=False))
  candidates = stateful.stack_states([], 1, alg.process.initial_client_state)
  out = alg.evaluate(params, candidates, [alg.process.initial_client_state],
                     [helpers.episode(client)])
  helpers.assert_query_loss(out[0], x, client)


@pytest.mark.parametrize('change, match', [
    (dict(population=0), 'population >= 1'),
    (dict(sampled_clients=0), 'sampled_clients in'),
    (dict(sampled_clients=N + 1), 'sampled_clients in'),
    (dict(local_epochs=0), 'local_epochs >= 1'),
    (dict(client_optimizer='adam'), 'client_optimizer = "sgd"'),
    (dict(fedavg_server_optimizer='adam'), 'fedavg_server_optimizer = "sgd"'),
])
def test_bad_input(setup, change, match):
  model, _, _ = setup
  hp = dict(population=N, sampled_clients=S, client_optimizer='sgd')
  hp.update(change)
  with pytest.raises(ValueError, match=match):
    ALGORITHMS.get('scaffold')(model, Hparams(**hp))
