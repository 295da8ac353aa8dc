"""FedEC, FedEC-l2 and Reptile (FedEC-wo) against plain-TF references (FedEC Alg. 1, Eqs. 6-13)."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, fedec
from tff_meta.learning import losses

LR, BATCH, EPOCHS, ALPHA = 0.1, 8, 2, 0.7


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  client = data.train[0].all
  return model, collections.OrderedDict(x=client.x, y=client.y)


def test_constrained_loss_is_eq13_soft_target_cross_entropy():
  rng = np.random.default_rng(0)
  logits = tf.constant(rng.normal(size=(6, 5)), tf.float32)
  ref = tf.constant(rng.normal(size=(6, 5)), tf.float32)
  y = tf.constant(rng.integers(0, 5, 6), tf.int32)
  eq11 = losses.cross_entropy(logits, y) + ALPHA * losses.kl_to_reference(ref, logits)
  p_ref = tf.nn.softmax(ref)
  q = (tf.one_hot(y, 5) + ALPHA * p_ref) / (1 + ALPHA)                       # Eq. 12
  soft_ce = tf.reduce_mean(-tf.reduce_sum(q * tf.nn.log_softmax(logits), -1))
  constant = ALPHA * tf.reduce_mean(tf.reduce_sum(p_ref * tf.math.log(p_ref), -1))
  np.testing.assert_allclose(eq11.numpy(), ((1 + ALPHA) * soft_ce + constant).numpy(), rtol=1e-5)


def _reference_inner_update(weights, hat, data, constraint, alpha):
  """Plain eager TF: EPOCHS passes of minibatch SGD on CE + alpha * c(theta, hat)."""
  w = [tf.Variable(v) for v in weights]
  for _ in range(EPOCHS):
    for start in range(0, len(data['y']), BATCH):
      bx, by = data['x'][start:start + BATCH], data['y'][start:start + BATCH]
      with tf.GradientTape() as tape:
        logits = helpers.mlp_logits(w, bx)
        loss = helpers.ce(logits, by)
        if constraint == 'kl':
          p_hat = tf.nn.softmax(helpers.mlp_logits(hat, bx))
          kl = tf.reduce_sum(p_hat * (tf.math.log(p_hat) - tf.nn.log_softmax(logits)), -1)
          loss += alpha * tf.reduce_mean(kl)
        elif constraint == 'l2':
          loss += 0.5 * alpha * sum(tf.reduce_sum((a - b) ** 2) for a, b in zip(w, hat))
      for v, g in zip(w, tape.gradient(loss, w)):
        v.assign_sub(LR * g)
  return [v.numpy() for v in w]


def _process(model, constraint):
  sgd = lambda lr: tff.learning.optimizers.build_sgdm(learning_rate=lr)
  return fedec.build_fedec_process(model, constraint=constraint, alpha=ALPHA,
                                   client_optimizer=sgd(LR), server_optimizer=sgd(1.0),
                                   local_epochs=EPOCHS, batch_size=BATCH)


def _state(visits, hat):
  return collections.OrderedDict(visits=np.float32(visits), hat=hat)


@pytest.mark.parametrize('constraint', ['kl', 'l2'])
def test_client_update_matches_plain_tf(tff_context, setup, constraint):
  model, data = setup
  proc = _process(model, constraint)
  weights = model.initial_trainable
  hat = [w + 0.05 * np.random.default_rng(i).normal(size=w.shape).astype(np.float32)
         for i, w in enumerate(weights)]
  out, new_state = proc.client_update(collections.OrderedDict(weights=weights),
                                      _state(3, hat), data)
  trained = _reference_inner_update(weights, hat, data, constraint, ALPHA)
  assert out['weight'] == 1.0   # uniform: (1/|I^t|) sum, Alg. 1 l. 7
  helpers.assert_rel_close(out['weighted_update']['weights'],
                           [w - t for w, t in zip(weights, trained)], rtol=2e-4)
  helpers.assert_rel_close(new_state['hat'], trained, rtol=2e-4)   # Alg. 1 l. 18
  assert new_state['visits'] == 4


def test_constraint_is_off_on_first_participation(tff_context, setup):
  model, data = setup
  proc = _process(model, 'kl')
  weights = model.initial_trainable
  far = [w + 1.0 for w in weights]
  out, new_state = proc.client_update(collections.OrderedDict(weights=weights),
                                      _state(0, far), data)
  plain = _reference_inner_update(weights, far, data, None, 0.0)
  helpers.assert_rel_close(new_state['hat'], plain, rtol=2e-4)
  assert new_state['visits'] == 1


def test_rejected_client_keeps_its_state(tff_context, setup):
  model, data = setup
  proc = _process(model, 'kl')
  bad = collections.OrderedDict(x=np.full_like(data['x'], np.nan), y=data['y'])
  hat = [w + 0.5 for w in model.initial_trainable]
  out, new_state = proc.client_update(collections.OrderedDict(weights=model.initial_trainable),
                                      _state(2, hat), bad)
  assert out['num_rejected'] == 1.0 and new_state['visits'] == 2
  helpers.assert_rel_close(new_state['hat'], hat, rtol=0)


def test_round_keeps_each_clients_state_and_moves_phi_toward_the_mean(tff_context, setup):
  model, data = setup
  data2 = collections.OrderedDict(x=data['x'][::-1].copy(), y=data['y'][::-1].copy())
  proc = _process(model, 'kl')
  state = proc.initialize()
  init = proc.initial_client_state
  state1, states, _ = proc.next(state, [init, init], [data, data2])
  assert all(s['visits'] == 1 for s in states)
  assert not np.allclose(states[0]['hat'][0], states[1]['hat'][0])   # no leak between clients
  mean_hat = [np.mean([s['hat'][i] for s in states], axis=0) for i in range(4)]
  helpers.assert_rel_close(state1['params']['weights'], mean_hat, rtol=1e-4)   # eps_out = 1


@pytest.mark.slow
def test_reptile_is_registered_with_the_papers_server_step():
  model = helpers.mlp_spec()
  alg = ALGORITHMS.get('reptile')(model, Hparams(server_optimizer='sgd', server_lr=0.5))
  assert not alg.stateful and alg.process.weighting == 'uniform'
  assert ALGORITHMS.get('fedec')(model, Hparams()).stateful


@pytest.mark.parametrize('hparams, message', [
    (dict(constraint_weight=-0.1), 'alpha = constraint_weight >= 0'),
    (dict(local_epochs=0), 'tau = local_epochs >= 1'),
])
def test_bad_hparams_are_named(hparams, message):
  for name in ('fedec', 'fedec_l2', 'reptile'):
    with pytest.raises(ValueError, match=message):
      ALGORITHMS.get(name)(helpers.mlp_spec(), Hparams(**hparams))
