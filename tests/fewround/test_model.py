"""The few-round classifiers (tff_meta.fewround.model): the learned temperature of
`scaled_distance` against the paper's distance classifier and hand computation."""

import numpy as np
import pytest
import tensorflow as tf

from tests.fewround import fixtures
from tff_meta.core.config_file import ConfigError
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import process as P
from tff_meta.fewround.model import ClientBatch

SHAPE, WAYS = fixtures.SHAPE, fixtures.WAYS


def _scores(model, weights, c, protos, mask, gamma):
  """(local loss, test logits, embeddings, dense maps) in a graph."""
  def run(weights, x, y, protos, mask):
    batch = ClientBatch(x, y, tf.ones([WAYS]))
    return (model.classifier.local_loss(model, weights, batch, protos, mask, gamma),
            model.classifier.logits(model, weights, x, None, protos, mask),
            model.embed(weights, x), model.dense(weights, x))
  return fixtures.in_graph(run, list(weights), c['support_x'], c['support_y'], protos, mask)


def _ce(logits, y):
  z = logits - logits.max(-1, keepdims=True)
  return -(z[np.arange(len(y)), y] - np.log(np.exp(z).sum(-1)))


@pytest.fixture
def setting():
  rng = np.random.default_rng(1)
  c = fixtures.client(rng, (2, 3, 2))
  plain, scaled = fixtures.tiny('distance'), fixtures.tiny('scaled_distance')
  protos = rng.normal(size=(WAYS, plain.feature_dim)).astype(np.float32)
  return c, plain, scaled, protos, np.ones(WAYS, np.float32)


@pytest.mark.slow
def test_at_t_zero_it_is_the_papers_distance_classifier(setting):
  c, plain, scaled, protos, mask = setting
  assert len(scaled.initial_weights) == len(plain.initial_weights) + 1
  assert scaled.initial_weights[-1].shape == () and scaled.initial_weights[-1] == 0.0
  for a, b in zip(_scores(plain, plain.initial_weights, c, protos, mask, 0.5),
                  _scores(scaled, scaled.initial_weights, c, protos, mask, 0.5)):
    np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.slow
def test_tau_multiplies_every_distance_of_eq2_eq3_and_the_logits(setting):
  c, _, scaled, protos, mask = setting
  tau, gamma = 4.0, 0.5
  weights = list(scaled.initial_weights[:-1]) + [np.float32(np.log(tau))]
  loss, logits, f, dense = _scores(scaled, weights, c, protos, mask, gamma)
  y = c['support_y']
  d2 = lambda a, p: ((a[..., None, :] - p) ** 2).sum(-1)
  np.testing.assert_allclose(logits, -tau * d2(f, protos), rtol=1e-5)
  local = np.stack([f[y == k].mean(0) for k in range(WAYS)])     # every class present
  eq2 = _ce(-tau * d2(f, local), y).mean()
  positions = dense.reshape(len(y), -1, dense.shape[-1])
  eq3 = np.mean([_ce(-tau * d2(p, protos), np.full(len(p), k)).sum()
                 for p, k in zip(positions, y)])
  np.testing.assert_allclose(loss, eq2 + gamma * eq3, rtol=1e-5)


@pytest.mark.slow
def test_zero_head_leaves_the_temperature(tff_context):
  model = fixtures.tiny('scaled_distance')
  weights = list(model.initial_weights[:-1]) + [np.float32(0.7)]
  start, _, _ = P.build_round(model, P.FewRoundHparams(zero_head=True), P.data_spec(SHAPE))
  assert np.isclose(start(weights)['theta'][-1], 0.7)


@pytest.mark.slow
def test_temperature_lr_scale_multiplies_the_meta_step_to_t(tff_worker, tff_context):
  model = fixtures.tiny('scaled_distance')
  data = fixtures.clients()[:2]

  def one_episode(scale):
    hp = P.FewRoundHparams(rounds=1, inner_lr=0.05, local_steps=1, server_lr=0.01,
                           meta_update='server_adam', head_meta_lr_scale=scale)
    process = P.build_meta_training(model, hp, P.data_spec(SHAPE))
    state = process.initialize()
    round_state, _ = process.round(process.start(state), data)
    return process.meta_update(state, round_state, data)[0]['phi']

  one, ten = one_episode(1.0), one_episode(10.0)
  body = model.num_backbone
  for a, b in zip(one[:body], ten[:body]):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
  assert abs(one[-1]) > 1e-4   # t moved (Adam: by about beta)
  np.testing.assert_allclose(ten[-1], 10.0 * one[-1], rtol=1e-4)


def test_temperature_keys_are_checked():
  for changes, key in (({'temperature': 'fixed'}, 'temperature must be one of none, learned'),
                       ({'temperature_lr_scale': 0.0}, 'temperature_lr_scale must be > 0')):
    with pytest.raises(ConfigError, match=key):
      config_lib.load(None, changes).validate()
