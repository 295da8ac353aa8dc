"""Ditto (Li et al. 2021, Alg. 1) against plain-TF references."""

import numpy as np
import pytest

from tests import helpers
from tff_meta.algorithms import Hparams

LR, EPOCHS, PERSONAL_EPOCHS, BATCH, LAM = 0.1, 1, 2, 8, 0.5
HP = Hparams(client_optimizer='sgd', client_lr=LR, local_epochs=EPOCHS,
             personal_epochs=PERSONAL_EPOCHS, batch_size=BATCH, ditto_lambda=LAM)


@pytest.fixture(scope='module')
def setup():
  return helpers.stateful_setup('ditto', HP)


def reference_personal(global_weights, personal, x, y, epochs=PERSONAL_EPOCHS):
  """SGD on F(v) + (lambda/2)||v - w^t||^2 (Ditto Eq. 2)."""
  proximal = lambda v, bx, by: [g + LAM * (vi - wi) for g, vi, wi in
                                zip(helpers.loss_grad(v, bx, by), v, global_weights)]
  return helpers.reference_minibatch_sgd(personal, x, y, LR, epochs, BATCH, proximal)


def test_client_update_global_and_personal(tff_context, setup):
  client, w, v, out, new_state = helpers.client_update_from_perturbed(
      setup, lambda v: {'personal': v})
  trained = helpers.reference_minibatch_sgd(w, client.x, client.y, LR, EPOCHS, BATCH)
  n = len(client.y)   # example weighting, as FedAvg
  assert out['weight'] == n
  helpers.assert_rel_close([u / n for u in out['weighted_update']['weights']],
                           [a - b for a, b in zip(w, trained)], rtol=1e-4)
  helpers.assert_rel_close(new_state['personal'], reference_personal(w, v, client.x, client.y))
  assert new_state['visits'] == 1.0


def test_personal_states_persist_per_client(tff_context, setup):
  _, data, alg = setup
  states = helpers.check_states_follow_clients(alg.process, helpers.full_data_clients(data))
  assert np.max(np.abs(states[0]['personal'][2] - states[1]['personal'][2])) > 1e-4


def test_evaluation_known_uses_v_new_trains_proximal_from_w(tff_context, setup):
  known, new, w, v, out = helpers.evaluate_known_and_new(
      setup, lambda v: {'personal': v}, visits=2.0)
  adapted = reference_personal(w, w, new.support.x, new.support.y)
  for result, weights, client in [(out[0], v, known), (out[1], adapted, new)]:
    helpers.assert_query_loss(result, weights, client)


@pytest.mark.parametrize('change, match', [
    (dict(ditto_lambda=-0.1), 'ditto_lambda >= 0'),
    (dict(local_epochs=0), 'local_epochs >= 1'),
    (dict(personal_epochs=0), 'personal_epochs >= 1'),
])
def test_bad_input(setup, change, match):
  helpers.assert_bad_hparams('ditto', setup[0], change, match)
