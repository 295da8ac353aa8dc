"""APFL (Deng et al. 2020, Alg. 1, adaptive alpha) against a plain-TF reference."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import Hparams
from tff_meta.algorithms.apfl import ClipLastToUnit

LR, EPOCHS, BATCH, ALPHA = 0.1, 2, 8, 0.4
HP = Hparams(client_optimizer='sgd', client_lr=LR, local_epochs=EPOCHS, batch_size=BATCH,
             apfl_alpha=ALPHA)


@pytest.fixture(scope='module')
def setup():
  return helpers.stateful_setup('apfl', HP)


def _mix(alpha, v, w):
  return [alpha * a + (1 - alpha) * b for a, b in zip(v, w)]


def reference_local(w, v, alpha, x, y):
  """The paper's three updates, each from the old (w, v, alpha), minibatch by minibatch."""
  w = [tf.constant(t) for t in w]
  v = [tf.constant(t) for t in v]
  alpha = float(alpha)
  for _ in range(EPOCHS):
    for start in range(0, len(y), BATCH):
      bx, by = x[start:start + BATCH], y[start:start + BATCH]
      g_w = helpers.loss_grad(w, bx, by)
      g_mix = helpers.loss_grad(_mix(alpha, v, w), bx, by)             # grad f at v-bar
      g_alpha = sum(float(tf.reduce_sum((a - b) * g)) for a, b, g in zip(v, w, g_mix))
      v = [a - LR * alpha * g for a, g in zip(v, g_mix)]                # grad_v = alpha grad f
      w = [a - LR * g for a, g in zip(w, g_w)]
      alpha = float(np.clip(alpha - LR * g_alpha, 0.0, 1.0))
  return [t.numpy() for t in w], [t.numpy() for t in v], alpha


def test_client_update_matches_the_three_updates(tff_context, setup):
  client, w, v, out, new_state = helpers.client_update_from_perturbed(
      setup, lambda v: {'personal': v, 'alpha': np.float32(ALPHA)})
  ref_w, ref_v, ref_alpha = reference_local(w, v, ALPHA, client.x, client.y)
  assert out['weight'] == 1.0   # uniform mean over the sampled clients
  helpers.assert_rel_close(out['weighted_update']['weights'],
                           [a - b for a, b in zip(w, ref_w)], rtol=1e-4)
  helpers.assert_rel_close(new_state['personal'], ref_v, rtol=1e-5)
  np.testing.assert_allclose(new_state['alpha'], ref_alpha, rtol=1e-5)
  assert abs(ref_alpha - ALPHA) > 1e-4   # alpha did move


def test_alpha_is_clipped_to_unit_interval():
  opt = ClipLastToUnit(tff.learning.optimizers.build_sgdm(1.0))
  weights = (tf.constant([1.0, 2.0]), tf.constant(0.5))
  state = opt.initialize(tuple(tf.TensorSpec(w.shape, w.dtype) for w in weights))
  for grad, expected in [(-3.0, 1.0), (3.0, 0.0), (0.25, 0.25)]:
    _, out = opt.next(state, weights, (tf.constant([1.0, 1.0]), tf.constant(grad)))
    np.testing.assert_allclose(out[0], [0.0, 1.0])
    np.testing.assert_allclose(out[1], expected)


def test_states_persist_per_client(tff_context, setup):
  _, data, alg = setup
  states = helpers.check_states_follow_clients(alg.process, helpers.full_data_clients(data))
  assert states[0]['alpha'] != states[1]['alpha']


def test_evaluation_mixes_own_or_adapted_personal_model_with_w(tff_context, setup):
  known, new, w, v, out = helpers.evaluate_known_and_new(
      setup, lambda v: {'personal': v, 'alpha': np.float32(0.7)}, visits=4.0)
  _, v_new, alpha_new = reference_local(w, w, ALPHA, new.support.x, new.support.y)
  for result, weights, client in [(out[0], _mix(0.7, v, w), known),
                                  (out[1], _mix(alpha_new, v_new, w), new)]:
    helpers.assert_query_loss(result, weights, client)


@pytest.mark.parametrize('change, match', [
    (dict(apfl_alpha=1.5), r'apfl_alpha in \[0, 1\]'),
    (dict(apfl_alpha=-0.1), r'apfl_alpha in \[0, 1\]'),
    (dict(local_epochs=0), 'local_epochs >= 1'),
])
def test_bad_input(setup, change, match):
  helpers.assert_bad_hparams('apfl', setup[0], change, match)
