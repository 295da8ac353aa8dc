"""pFedMe (T. Dinh et al. 2020, Alg. 1, Eqs. 7-8) against a plain-TF reference."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, pfedme
from tff_meta.evaluation import personalized

LAM, PERSONAL_LR, K, ETA, R, BATCH, BETA = 2.0, 0.1, 3, 0.05, 3, 6, 0.5


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  clients = [collections.OrderedDict(x=c.all.x, y=c.all.y) for c in data.train[:2]]
  hp = Hparams(pfedme_lambda=LAM, pfedme_personal_lr=PERSONAL_LR, pfedme_inner_steps=K,
               pfedme_eta=ETA, local_steps=R, batch_size=BATCH, fedavg_server_lr=BETA)
  return model, clients, data, ALGORITHMS.get('pfedme')(model, hp)


def reference_theta(w, theta, x, y):
  """K plain gradient steps on f(theta; x, y) + (lambda/2) ||theta - w||^2 (Eq. 7)."""
  for _ in range(K):
    theta = [t - PERSONAL_LR * (g + LAM * (t - wi))
             for t, g, wi in zip(theta, helpers.loss_grad(theta, x, y), w)]
  return theta


def reference_local_model(weights, data):
  """Plain eager TF: w_{i,R} after R local steps."""
  w = theta = [tf.constant(v) for v in weights]
  for r in range(R):
    x, y = helpers.cyclic_batch(data['x'], data['y'], BATCH, r)
    theta = reference_theta(w, theta, x, y)
    w = [wi - ETA * LAM * (wi - ti) for wi, ti in zip(w, theta)]
  return [v.numpy() for v in w]


@pytest.mark.slow
def test_client_update_matches_plain_tf(tff_context, setup):
  model, clients, _, alg = setup
  out = alg.process.client_update(alg.process.initialize()['params'], clients[0])
  local = reference_local_model(model.initial_trainable, clients[0])
  expected = [w - v for w, v in zip(model.initial_trainable, local)]
  helpers.assert_rel_close(out['weighted_update']['weights'], expected, rtol=1e-4)
  assert out['weight'] == 1.0 and out['metrics']['num_examples'] == R * BATCH


@pytest.mark.slow
def test_round_beta_mixes_and_evaluation_solves_moreau_envelope(tff_context, setup):
  model, clients, data, alg = setup
  state = alg.process.initialize()
  new_state, metrics = alg.process.next(state, clients)
  locals_ = [reference_local_model(model.initial_trainable, c) for c in clients]
  for i, w in enumerate(model.initial_trainable):
    mixed = (1 - BETA) * w + BETA * (locals_[0][i] + locals_[1][i]) / 2
    np.testing.assert_allclose(new_state['params']['weights'][i], mixed, atol=1e-6)
  assert metrics['num_clients'] == 2
  episode = helpers.episode(data.test[0])
  got = personalized.summarize(alg.evaluate(new_state['params'], [episode]))
  w = [tf.constant(v) for v in new_state['params']['weights']]
  theta = reference_theta(w, w, episode['support_x'], episode['support_y'])
  logits = helpers.mlp_logits(theta, episode['query_x'])
  assert got.accuracy == pytest.approx(np.mean(np.argmax(logits, -1) == episode['query_y']))
  assert alg.client_flops(clients[0]) > 0


def test_bad_input(setup):
  model = setup[0]
  for change, message in ((dict(pfedme_lambda=0.0), 'pfedme_lambda > 0'),
                          (dict(pfedme_inner_steps=0), r'pfedme_inner_steps \(K\) >= 1'),
                          (dict(local_steps=0), r'local_steps \(R\) >= 1'),
                          (dict(pfedme_eta=-1.0), 'pfedme_eta > 0')):
    with pytest.raises(ValueError, match=message):
      ALGORITHMS.get('pfedme')(model, Hparams(**change))
