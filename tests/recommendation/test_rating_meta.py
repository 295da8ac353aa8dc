"""MAML / Meta-SGD on ratings run through the same FedMeta TFF process as the image tasks.

The references are plain eager TF with nested tapes, independent of Keras and TFF; every test
runs for every rating model (the paper's `rating_mlp`, `rating_wide_mlp` and
`rating_factor_mlp`).
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import fedmeta
from tff_meta.learning import losses
from tff_meta.models import build_model_spec
from tff_meta.recommendation import evaluation, schedules
from tff_meta.recommendation.tasks import Episode
from tff_meta.recommendation.training import Trainer

ALPHA, DIM, HIDDEN = 0.3, 6, 4
MOVIES, FACTORS = 4, 3      # rating_factor_mlp: the first 4 inputs are its "movie" columns


def _mlp(w, x):
  w1, b1, w2, b2 = w
  return 5.0 * tf.sigmoid(tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2)


def _wide_mlp(w, x):
  """5 sigmoid(v . relu(W x + c) + w . x + b), weights in Keras order (W, c, v, w, b)."""
  w1, b1, v, w_wide, b_wide = w
  return 5.0 * tf.sigmoid(tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), v)
                          + tf.matmul(x, w_wide) + b_wide)


def _factor_mlp(w, x):
  """`_wide_mlp` plus <E x_movie, u>, weights in Keras order (W, c, v, E^T, u, w, b)."""
  w1, b1, v, emb, user, w_wide, b_wide = w
  factor = tf.matmul(tf.matmul(x[:, :MOVIES], emb), user[:, None])
  return 5.0 * tf.sigmoid(tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), v) + factor
                         + tf.matmul(x, w_wide) + b_wide)


FORWARD = {'rating_mlp': _mlp, 'rating_wide_mlp': _wide_mlp, 'rating_factor_mlp': _factor_mlp}
OPTIONS = {'rating_factor_mlp': {'movies': MOVIES, 'factors': FACTORS}}
_forward = None   # set by the `setup` fixture to the model's plain-TF forward


def _mse(w, x, y):
  return tf.reduce_mean(tf.square(tf.reshape(_forward(w, x), [-1]) - y))


def _reference(weights, ep, steps, rates=None):
  theta = [tf.Variable(w) for w in weights]
  alphas = [tf.Variable(r) for r in rates] if rates is not None else None
  with tf.GradientTape(persistent=True) as outer:
    current = [tf.identity(t) for t in theta]
    for _ in range(steps):
      with tf.GradientTape() as inner:
        inner.watch(current)
        loss = _mse(current, ep['support_x'], ep['support_y'])
      g = inner.gradient(loss, current)
      a = alphas or [ALPHA] * len(current)
      current = [c - r * gi for c, r, gi in zip(current, a, g)]
    q = _mse(current, ep['query_x'], ep['query_y'])
  gw = [t.numpy() for t in outer.gradient(q, theta)]
  ga = [t.numpy() for t in outer.gradient(q, alphas)] if alphas else None
  return gw, ga, current, q.numpy()


@pytest.fixture(scope='module', params=sorted(FORWARD))
def setup(request):
  global _forward
  _forward = FORWARD[request.param]
  model = build_model_spec(request.param, (DIM,), 1, seed=1, hidden_units=HIDDEN,
                           **OPTIONS.get(request.param, {}))
  if request.param != 'rating_mlp':    # the wide path starts at zero: move it off zero
    rng = np.random.default_rng(5)
    model.initial_trainable[-2] = rng.normal(0, 0.3, (DIM, 1)).astype(np.float32)
    model.initial_trainable[-1] = np.array([0.4], np.float32)
  rng = np.random.default_rng(0)
  eps = []
  for n_s, n_q in ((7, 3), (5, 4)):
    ep = collections.OrderedDict(
        support_x=rng.normal(size=(n_s, DIM)).astype(np.float32),
        support_y=rng.integers(1, 6, n_s).astype(np.float32),
        query_x=rng.normal(size=(n_q, DIM)).astype(np.float32),
        query_y=rng.integers(1, 6, n_q).astype(np.float32))
    eps.append(ep)
  return model, eps


def _process(model, variant, steps=2):
  return fedmeta.build_fedmeta_process(
      model, variant=variant, inner_lr=ALPHA, inner_steps=steps,
      server_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=1.0),
      loss=losses.SQUARED_ERROR)


def test_model_is_the_papers_plus_the_wide_path(setup):
  model, _ = setup
  paper = DIM * HIDDEN + HIDDEN + HIDDEN + 1
  wide = DIM if model.name != 'rating_mlp' else 0
  factor = MOVIES * FACTORS + FACTORS if model.name == 'rating_factor_mlp' else 0
  assert model.num_parameters == paper + wide + factor
  assert model.x_spec.shape.as_list() == [None, DIM]


@pytest.mark.slow
def test_maml_round_on_ratings_matches_plain_tf(tff_context, setup):
  model, eps = setup
  proc = _process(model, 'maml')
  assert proc.client_update.type_signature.parameter[1]['support_y'].dtype == np.float32
  state = proc.initialize()
  out = proc.client_update(state['params'], eps[0])
  g0, _, _, q0 = _reference(model.initial_trainable, eps[0], 2)
  helpers.assert_rel_close(out['weighted_update']['weights'], g0, rtol=1e-5)
  assert out['metrics']['loss_sum'] == pytest.approx(q0 * 3, rel=1e-5)
  new_state, metrics = proc.next(state, eps)
  g1 = _reference(model.initial_trainable, eps[1], 2)[0]
  for old, new, a, b in zip(state['params']['weights'], new_state['params']['weights'], g0, g1):
    np.testing.assert_allclose(new, old - (a + b) / 2, atol=2e-6)
  assert metrics['num_examples'] == 7 and metrics['num_rejected'] == 0


@pytest.mark.slow
def test_scheduled_server_rate_reaches_the_real_process(tff_context, setup):
  """`schedules.with_rate` on the process's own state: the SGD server step (built at rate 1)
  moves the weights by 0.25 x the meta-gradient, and the next state keeps the set rate."""
  model, eps = setup
  proc = _process(model, 'maml')
  state = collections.OrderedDict(proc.initialize())
  state['optimizer_state'] = schedules.with_rate(state['optimizer_state'], 0.25)
  new_state, _ = proc.next(state, eps[:1])
  g0 = _reference(model.initial_trainable, eps[0], 2)[0]
  for old, new, g in zip(state['params']['weights'], new_state['params']['weights'], g0):
    np.testing.assert_allclose(new, old - 0.25 * g, atol=2e-6)
  assert float(new_state['optimizer_state']['learning_rate']) == pytest.approx(0.25)


@pytest.mark.slow
def test_metasgd_learns_rates_on_ratings(tff_context, setup):
  model, eps = setup
  proc = _process(model, 'metasgd', steps=1)
  params = proc.initialize()['params']
  out = proc.client_update(params, eps[1])
  rates = [np.full(w.shape, ALPHA, np.float32) for w in model.initial_trainable]
  gw, ga, _, _ = _reference(model.initial_trainable, eps[1], 1, rates)
  helpers.assert_rel_close(out['weighted_update']['weights'], gw, rtol=1e-5)
  helpers.assert_rel_close(out['weighted_update']['rates'], ga, rtol=1e-4)


@pytest.mark.slow
def test_predict_adapts_on_support_only(tff_context, setup):
  model, eps = setup
  proc = _process(model, 'maml')
  params = proc.initialize()['params']
  predict = evaluation.build_predict(model, proc.params_type, loss=losses.SQUARED_ERROR,
                                     inner_lr=ALPHA, steps=2)
  episodes = [Episode('u', e['support_x'], e['support_y'], e['query_x'], e['query_y'])
              for e in eps]
  preds = predict(params, evaluation.prediction_inputs(episodes))
  for p, e in zip(preds, eps):
    adapted = _reference(model.initial_trainable, e, 2)[2]
    np.testing.assert_allclose(p, _forward(adapted, e['query_x']).numpy(), rtol=1e-5)
  # The query ratings never reach the computation.
  assert 'query_y' not in str(predict.type_signature)


def test_trainer_is_plain_gradient_descent(setup):
  model, eps = setup
  e = eps[0]
  trainer = Trainer(model, losses.SQUARED_ERROR, 'sgd', 0.1, batch_size=0)
  w = trainer.fit(model.initial_trainable, e['support_x'], e['support_y'], steps=3)
  ref = [tf.constant(v) for v in model.initial_trainable]
  for _ in range(3):
    with tf.GradientTape() as tape:
      tape.watch(ref)
      loss = _mse(ref, e['support_x'], e['support_y'])
    ref = [r - 0.1 * g for r, g in zip(ref, tape.gradient(loss, ref))]
  helpers.assert_rel_close(w, [r.numpy() for r in ref], rtol=1e-5)
  np.testing.assert_allclose(trainer.predict(w, e['query_x']), _forward(ref, e['query_x']),
                             rtol=1e-5)


def test_trainer_takes_the_scheduled_rate(setup):
  """A Trainer built at 0.1, given a state whose rate `schedules.with_rate` set to 0.04, takes
  one plain gradient step of 0.04."""
  model, eps = setup
  e = eps[1]
  trainer = Trainer(model, losses.SQUARED_ERROR, 'sgd', 0.1, batch_size=0)
  assert trainer.learning_rate == 0.1
  state = schedules.with_rate(trainer.initialize(model.initial_trainable), 0.04)
  w, _ = trainer.run(model.initial_trainable, state, e['support_x'], e['support_y'], 1)
  ref = [tf.constant(v) for v in model.initial_trainable]
  with tf.GradientTape() as tape:
    tape.watch(ref)
    loss = _mse(ref, e['support_x'], e['support_y'])
  ref = [r - 0.04 * g for r, g in zip(ref, tape.gradient(loss, ref))]
  helpers.assert_rel_close(w, [r.numpy() for r in ref], rtol=1e-5)


def test_wide_model_with_a_silent_deep_path_is_the_bias_model():
  """v = 0: rating = 5 sigmoid(b + w_item) on one-hot items (item bias + user bias, logit link)."""
  items = 5
  model = build_model_spec('rating_wide_mlp', (items,), 1, seed=2, hidden_units=HIDDEN)
  w = [np.array(v) for v in model.initial_trainable]
  np.testing.assert_array_equal(w[3], 0.0)          # the wide path starts at zero
  w[2][:] = 0.0                                     # silence the deep path
  w[3][:, 0] = [-1.0, 0.0, 0.5, 1.5, -2.0]          # item biases (logit scale)
  w[4][:] = 0.25                                    # the user's bias
  x = np.eye(items, dtype=np.float32)[[3, 0, 2, 2]]
  trainer = Trainer(model, losses.SQUARED_ERROR, 'sgd', 0.1)
  expected = 5.0 / (1.0 + np.exp(-(0.25 + np.array([1.5, -1.0, 0.5, 0.5]))))
  np.testing.assert_allclose(np.ravel(trainer.predict(w, x)), expected, rtol=1e-6)
