"""FRL round and meta-update computations against plain-TF references.

Checks: models and prototypes are averaged with support-set sizes (per class,
over the clients holding the class), meta-updated models with data sizes;
prototypes use support data only; `next` equals the round-by-round episode;
deployment evaluates with the nearest global prototype, P_{R-1} or (test_prototypes =
recomputed) P_R at theta_R.
"""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tff_meta.fewround import process as P
from tff_meta.fewround import prototypes as pl
from tests.fewround import fixtures

SHAPE, WAYS = fixtures.SHAPE, fixtures.WAYS
tiny, client, clients, in_graph = (fixtures.tiny, fixtures.client, fixtures.clients,
                                   fixtures.in_graph)


@pytest.fixture(scope='module')
def built(tff_worker):
  model = tiny()
  hp = P.FewRoundHparams(rounds=1, gamma=0.5, inner_lr=0.05, local_steps=2, server_lr=0.01)
  return model, hp, P.build_meta_training(model, hp, P.data_spec(SHAPE))


def reference_round(model, hp, theta, server_protos, server_mask, has, data):
  """Per client: E steps of Eq. 4 from theta, and P_r(k) with theta (plain TF)."""
  def one(theta, protos, mask, sx, sy, n):
    batch = P.ClientBatch(sx, sy, tf.sequence_mask(n, WAYS, dtype=tf.float32))
    local, counts = pl.prototypes(model.embed(theta, sx), sy, WAYS)
    new = P.local_update(model, hp, theta, batch, protos, mask, hp.gamma * has)
    return new, local, counts
  return [in_graph(one, theta, server_protos, server_mask, c['support_x'], c['support_y'],
                   c['num_ways']) for c in data]


@pytest.mark.slow
def test_round_averages_with_support_sizes(built, tff_context):
  model, hp, process = built
  data = clients()
  theta = model.initial_weights
  rng = np.random.default_rng(1)
  protos = rng.normal(size=(WAYS, model.feature_dim)).astype(np.float32)
  server = collections.OrderedDict(theta=theta, protos=protos,
                                   mask=np.ones(WAYS, np.float32), has_protos=np.float32(1.0))
  got, metrics = process.round(server, data)
  per_client = reference_round(model, hp, theta, protos, server['mask'], 1.0, data)
  sizes = np.array([len(c['support_y']) for c in data], np.float64)
  for i, w in enumerate(got['theta']):
    expected = sum(n * pc[0][i] for n, pc in zip(sizes, per_client)) / sizes.sum()
    np.testing.assert_allclose(w, expected, rtol=2e-4, atol=1e-6)
  for c in range(WAYS):
    holders = [(n, pc[1][c]) for n, pc in zip(sizes, per_client) if pc[2][c] > 0]
    expected = sum(n * p for n, p in holders) / sum(n for n, _ in holders)
    np.testing.assert_allclose(got['protos'][c], expected, rtol=2e-4, atol=1e-6)
  np.testing.assert_array_equal(got['mask'], [1, 1, 1])
  assert metrics['num_examples'] == sizes.sum()
  # prototypes come from the support set only: other query data, same round
  other = [dict(c, query_x=c['query_x'] + 5.0, query_y=(c['query_y'] + 1) % WAYS) for c in data]
  again, _ = process.round(server, other)
  for a, b in zip(again['theta'] + [again['protos']], got['theta'] + [got['protos']]):
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_meta_update_averages_with_data_sizes(built, tff_context):
  model, hp, process = built
  data = clients()
  state = process.initialize()
  round_state = process.start(state)
  round_state, _ = process.round(round_state, data)
  new_state, metrics = process.meta_update(state, round_state, data)
  optimizer = tf.nest.map_structure(lambda x: x, P.OPTIMIZERS.get('adam')(hp.server_lr))

  def one(phi, theta, protos, mask, qx, qy):
    with tf.GradientTape() as tape:
      tape.watch(theta)
      loss = pl.prototype_loss(model.embed(theta, qx), qy, protos, mask)
    grads = tape.gradient(loss, theta)
    state = optimizer.initialize([tf.TensorSpec(w.shape, tf.float32) for w in phi])
    return optimizer.next(state, phi, grads)[1]

  phis = [in_graph(one, list(state['phi']), list(round_state['theta']), round_state['protos'],
                   round_state['mask'], c['query_x'], c['query_y']) for c in data]
  rho = np.array([len(c['support_y']) + len(c['query_y']) for c in data], np.float64)
  for i, w in enumerate(new_state['phi']):
    expected = sum(r * p[i] for r, p in zip(rho, phis)) / rho.sum()
    np.testing.assert_allclose(w, expected, rtol=2e-4, atol=1e-6)
  assert new_state['episode'] == 1 and new_state['optimizer_state']['step'] == 1
  assert metrics['num_examples'] == sum(len(c['query_y']) for c in data)


@pytest.mark.slow
def test_next_equals_round_by_round_episode(built, tff_context):
  _, _, process = built
  data = clients()
  state = process.initialize()
  fused, fused_metrics = process.next(state, data)
  stepwise, step_metrics = P.run_episode(process, state, data)
  for a, b in zip(fused['phi'], stepwise['phi']):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  assert fused_metrics['correct'] == step_metrics['correct']


@pytest.mark.slow
def test_deployment_predicts_nearest_global_prototype(built, tff_context):
  model, _, process = built
  data = clients()
  round_state = process.start_weights(model.initial_weights)
  for _ in range(2):
    round_state, _ = process.round(round_state, data)
  got = process.evaluate(round_state, data)

  def predict(theta, protos, x):
    return model.embed(theta, x)

  correct = 0
  for c in data:
    f = in_graph(predict, list(round_state['theta']), round_state['protos'], c['query_x'])
    d = ((f[:, None, :] - round_state['protos'][None]) ** 2).sum(-1)
    correct += int((d.argmin(1) == c['query_y']).sum())
  assert got['correct'] == correct


def _nearest_correct(embed, theta, protos, mask, data):
  """Queries whose nearest present prototype has their class (NumPy)."""
  correct = 0
  for c in data:
    f = in_graph(embed, list(theta), c['query_x'])
    d = ((f[:, None, :] - protos[None]) ** 2).sum(-1)
    d[:, mask == 0] = np.inf
    correct += int((d.argmin(1) == c['query_y']).sum())
  return correct


@pytest.mark.slow
def test_recomputed_test_prototypes_are_eq1_at_theta_r(built, tff_context):
  # test_prototypes = recomputed: after R rounds the queries are scored with theta_R and P_R,
  # the support-size weighted class means of f_{theta_R} (over the clients holding the class),
  # not with the round's P_{R-1}; the server's own state is left as it was.
  model, hp, _ = built
  data = clients()
  previous = P.build_round(model, hp, P.data_spec(SHAPE))
  recomputed = P.build_round(model, dataclasses.replace(hp, test_prototypes='recomputed'),
                             P.data_spec(SHAPE))
  state = previous[0](model.initial_weights)
  for _ in range(2):
    state, _ = previous[1](state, data)
  theta = list(state['theta'])
  embed = lambda theta, x: model.embed(theta, x)
  protos_r, mask = fixtures.global_prototypes_at(model, theta, data)
  assert mask.all()                                             # every class is held
  assert not np.allclose(protos_r, state['protos'], atol=1e-3)   # P_R differs from P_{R-1}
  got = recomputed[2](state, data)
  assert got['correct'] == _nearest_correct(embed, theta, protos_r, mask, data)
  assert got['num_examples'] == sum(len(c['query_y']) for c in data)
  want_loss = 0.0
  for c in data:
    f = in_graph(embed, theta, c['query_x'])
    logits = -((f[:, None, :] - protos_r[None]) ** 2).sum(-1).astype(np.float64)
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    want_loss += float((lse - logits[np.arange(len(f)), c['query_y']]).sum())
  np.testing.assert_allclose(got['loss_sum'], want_loss, rtol=1e-4)
  old = previous[2](state, data)
  assert old['correct'] == _nearest_correct(embed, theta, state['protos'], state['mask'], data)


@pytest.mark.slow
def test_head_lr_steps_the_linear_head_alone():
  model = fixtures.tiny('linear')
  c = fixtures.client(np.random.default_rng(0), (3, 2, 4), query=5)
  batch = dict(x=c['support_x'], y=c['support_y'])

  def step(head_lr):
    hp = P.FewRoundHparams(inner_lr=0.01, head_lr=head_lr, local_steps=1)

    def one(theta, x, y):
      b = P.ClientBatch(x, y, tf.ones([WAYS]))
      return P.local_update(model, hp, theta, b, None, None, 0.0)
    return fixtures.in_graph(one, model.initial_weights, batch['x'], batch['y'])

  base, faster = step(0.0), step(0.05)        # 0: the head uses inner_lr
  body = model.num_backbone
  for w0, a, b in zip(model.initial_weights[:body], base[:body], faster[:body]):
    np.testing.assert_allclose(a, b, atol=1e-7)
  for w0, a, b in zip(model.initial_weights[body:], base[body:], faster[body:]):
    np.testing.assert_allclose(b - w0, 5.0 * (a - w0), rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_zero_head_starts_each_episode_with_a_zero_head_and_phi_body(tff_context):
  model = fixtures.tiny('linear')
  start, _, _ = P.build_round(model, P.FewRoundHparams(zero_head=True), P.data_spec(SHAPE))
  theta = start(model.initial_weights)['theta']
  body = model.num_backbone
  for w0, w in zip(model.initial_weights[:body], theta[:body]):
    np.testing.assert_array_equal(w, w0)
  assert len(theta) > body and all(not np.any(w) for w in theta[body:])
