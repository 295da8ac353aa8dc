"""Per-FedAvg (Fallah et al. 2020, Alg. 1) FO and HF against plain-TF references."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, per_fedavg
from tff_meta.evaluation import personalized

ALPHA, BETA, DELTA, STEPS, BATCH = 0.3, 0.2, 1e-3, 3, 5


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  clients = [collections.OrderedDict(x=c.all.x, y=c.all.y) for c in data.train[:2]]
  return model, clients, data


def _process(model, variant):
  return per_fedavg.build_per_fedavg_process(
      model, variant=variant, alpha=ALPHA, beta=BETA, local_steps=STEPS, batch_size=BATCH,
      delta=DELTA, server_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=1.0))


def exact_hvp(weights, x, y, vector):
  """grad^2 f(w) v with nested tapes (second-order autodiff)."""
  weights = [tf.convert_to_tensor(w) for w in weights]
  with tf.GradientTape() as outer:
    outer.watch(weights)
    grads = helpers.loss_grad(weights, x, y)
    dot = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, vector)])
  return outer.gradient(dot, weights)


def reference_client(weights, data, variant, hessian='finite_difference'):
  """Plain eager TF Per-FedAvg local steps; returns w_0 - w_tau."""
  group = 3 if variant == 'hf' else 2
  w = [tf.constant(v) for v in weights]
  for t in range(STEPS):
    (x0, y0), (x1, y1), *rest = [helpers.cyclic_batch(data['x'], data['y'], BATCH, group * t + j)
                                 for j in range(group)]
    adapted = [wi - ALPHA * g for wi, g in zip(w, helpers.loss_grad(w, x0, y0))]
    g = helpers.loss_grad(adapted, x1, y1)
    if variant == 'hf':
      x2, y2 = rest[0]
      if hessian == 'exact':
        d = exact_hvp(w, x2, y2, g)
      else:
        plus = helpers.loss_grad([wi + DELTA * gi for wi, gi in zip(w, g)], x2, y2)
        minus = helpers.loss_grad([wi - DELTA * gi for wi, gi in zip(w, g)], x2, y2)
        d = [(p - m) / (2 * DELTA) for p, m in zip(plus, minus)]
      g = [gi - ALPHA * di for gi, di in zip(g, d)]
    w = [wi - BETA * gi for wi, gi in zip(w, g)]
  return [a - b.numpy() for a, b in zip(weights, w)]


def test_finite_difference_hvp_matches_second_order_autodiff(setup):
  model, clients, _ = setup
  # float64, and a step small enough not to cross the ReLU kinks.
  x, y = clients[0]['x'][:8].astype(np.float64), clients[0]['y'][:8]
  weights = [tf.constant(w, tf.float64) for w in model.initial_trainable]
  rng = np.random.default_rng(0)
  vector = [tf.constant(rng.normal(size=w.shape)) for w in model.initial_trainable]
  fd = per_fedavg.finite_difference_hvp(lambda w: helpers.loss_grad(w, x, y), weights, vector,
                                        1e-6)
  helpers.assert_rel_close(fd, exact_hvp(weights, x, y, vector), rtol=1e-5)


@pytest.mark.slow
def test_fo_and_hf_client_updates_match_plain_tf(tff_context, setup):
  model, clients, _ = setup
  updates = {}
  for variant in per_fedavg.VARIANTS:
    proc = _process(model, variant)
    out = proc.client_update(proc.initialize()['params'], clients[0])
    updates[variant] = out['weighted_update']['weights']
    assert out['weight'] == 1.0 and out['num_rejected'] == 0.0
    assert out['metrics']['num_examples'] == STEPS * BATCH
    helpers.assert_rel_close(updates[variant],
                             reference_client(model.initial_trainable, clients[0], variant),
                             rtol=1e-4)
  # HF follows the exact second-order update (I - alpha H) g, which FO drops.
  exact = reference_client(model.initial_trainable, clients[0], 'hf', hessian='exact')
  helpers.assert_rel_close(updates['hf'], exact, rtol=5e-3)
  gap = max(np.max(np.abs(a - b)) for a, b in zip(updates['fo'], exact))
  assert gap > 0.05 * max(np.max(np.abs(e)) for e in exact), 'FO should ignore the Hessian term'


@pytest.mark.slow
def test_round_averages_local_models_and_evaluation_adapts_once(tff_context, setup):
  model, clients, data = setup
  hp = Hparams(inner_lr=ALPHA, per_fedavg_beta=BETA, local_steps=STEPS, batch_size=BATCH)
  alg = ALGORITHMS.get('per_fedavg_fo')(model, hp)
  assert alg.train_data == 'full' and alg.display_name == 'Per-FedAvg(FO)'
  state = alg.process.initialize()
  new_state, metrics = alg.process.next(state, clients)
  refs = [reference_client(model.initial_trainable, c, 'fo') for c in clients]
  for i, w in enumerate(model.initial_trainable):
    np.testing.assert_allclose(new_state['params']['weights'][i],
                               w - (refs[0][i] + refs[1][i]) / 2, atol=1e-6)
  assert metrics['num_clients'] == 2
  # Personalization: one step of gradient descent with alpha on the support set.
  episode = helpers.episode(data.test[0])
  got = personalized.summarize(alg.evaluate(new_state['params'], [episode]))
  w = [tf.constant(v) for v in new_state['params']['weights']]
  g = helpers.loss_grad(w, episode['support_x'], episode['support_y'])
  logits = helpers.mlp_logits([a - ALPHA * b for a, b in zip(w, g)], episode['query_x'])
  expected = np.mean(np.argmax(logits, -1) == episode['query_y'])
  assert got.accuracy == pytest.approx(expected)
  assert alg.client_flops(clients[0]) > 0


def test_bad_input(setup):
  model, _, _ = setup
  opt = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  base = dict(variant='fo', alpha=0.1, beta=0.1, local_steps=1, batch_size=2,
              server_optimizer=opt)
  for change, message in ((dict(variant='so'), 'Unknown Per-FedAvg variant'),
                          (dict(local_steps=0), 'local_steps'),
                          (dict(alpha=0.0), 'alpha'), (dict(beta=-1.0), 'beta'),
                          (dict(variant='hf', delta=0.0), 'hf_delta')):
    with pytest.raises(ValueError, match=message):
      per_fedavg.build_per_fedavg_process(model, **{**base, **change})
