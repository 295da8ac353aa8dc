"""The two FRL meta-updates (Alg. 1 lines 22-26) against plain-TF / numpy references.

`server_adam` must equal Adam (hand-written in numpy) applied on the server to
the data-size weighted mean of the clients' first-order meta-gradients, over
two episodes (so the moments carry over and beta's decay applies);
`client_adam` is checked in test_process.py. A bad name is a config error.
"""

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.fewround import fixtures
from tff_meta.core.config_file import ConfigError
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import process as P
from tff_meta.fewround import prototypes as pl

SHAPE = fixtures.SHAPE


def query_grads(model, theta, protos, mask, data):
  """g_k = grad_theta L^{Q_k}(theta_R, P) per client (plain TF)."""
  def one(theta, protos, mask, qx, qy):
    with tf.GradientTape() as tape:
      tape.watch(theta)
      loss = pl.prototype_loss(model.embed(theta, qx), qy, protos, mask)
    return tape.gradient(loss, theta)
  return [fixtures.in_graph(one, list(theta), protos, mask, c['query_x'], c['query_y'])
          for c in data]


def adam(phi, m, v, g, lr, t, b1=0.9, b2=0.999, eps=1e-7):
  """Adam by hand (TFF's form: lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps))."""
  m = [b1 * a + (1 - b1) * x for a, x in zip(m, g)]
  v = [b2 * a + (1 - b2) * x * x for a, x in zip(v, g)]
  rate = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
  return [p - rate * a / (np.sqrt(b) + eps) for p, a, b in zip(phi, m, v)], m, v


@pytest.mark.slow
def test_server_adam_is_adam_on_the_mean_meta_gradient(tff_worker, tff_context):
  model = fixtures.tiny()
  hp = P.FewRoundHparams(rounds=1, gamma=0.5, inner_lr=0.05, local_steps=1, server_lr=0.01,
                         server_lr_decay_episode=1, meta_update='server_adam')
  process = P.build_meta_training(model, hp, P.data_spec(SHAPE))
  data = fixtures.clients()[:2]
  data[1] = dict(data[1], query_y=(data[1]['query_y'] + 1) % fixtures.WAYS)   # other gradients
  rho = np.array([len(c['support_y']) + len(c['query_y']) for c in data], np.float64)
  state = process.initialize()
  phi = [np.asarray(w, np.float64) for w in state['phi']]
  m = [np.zeros_like(w) for w in phi]
  v = [np.zeros_like(w) for w in phi]
  for t, lr in ((1, 0.01), (2, 0.001)):          # beta / 10 from episode 1 on
    round_state = process.start(state)
    round_state, _ = process.round(round_state, data)
    per_client = query_grads(model, round_state['theta'], round_state['protos'],
                             round_state['mask'], data)
    mean = [sum(r * g[i] for r, g in zip(rho, per_client)) / rho.sum()
            for i in range(len(phi))]
    phi, m, v = adam(phi, m, v, mean, lr, t)
    state, metrics = process.meta_update(state, round_state, data)
    for got, want in zip(state['phi'], phi):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    opt = state['optimizer_state']
    assert opt['step'] == t and state['episode'] == t
    for got, want in zip(opt['preconditioner'], v):   # (mean g)^2, not mean(g^2)
      np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-10)
    assert np.isclose(opt['learning_rate'], 0.01)    # the decay is not stored
    assert metrics['num_examples'] == sum(len(c['query_y']) for c in data)


@pytest.mark.slow
def test_client_adam_differs_from_server_adam(tff_worker, tff_context):
  """With two clients of different gradients, averaging Adam steps != Adam of the mean."""
  model = fixtures.tiny()
  data = fixtures.clients()[:2]
  data[1] = dict(data[1], query_y=(data[1]['query_y'] + 1) % fixtures.WAYS)
  phis = {}
  for name in ('client_adam', 'server_adam'):
    hp = P.FewRoundHparams(rounds=1, meta_update=name)
    process = P.build_meta_training(model, hp, P.data_spec(SHAPE))
    phis[name], _ = P.run_episode(process, process.initialize(), data)
  gaps = [np.abs(a - b).max() for a, b in zip(phis['client_adam']['phi'],
                                                phis['server_adam']['phi'])]
  assert max(gaps) > 1e-4


def test_bad_meta_update_is_a_config_error():
  cfg = config_lib.load(os.path.join(REPO, 'configs/fewround/femnist62_5way_iid.toml'),
                        {'meta_update': 'server_sgd'})
  with pytest.raises(ConfigError, match='meta_update must be one of client_adam, server_adam'):
    cfg.validate()
  assert config_lib.load(None, {'meta_update': 'server_adam'}).validate().hparams().meta_update \
      == 'server_adam'


@pytest.mark.slow
def test_recomputed_train_prototypes_take_the_query_loss_with_p_r(tff_worker, tff_context):
  # train_prototypes = recomputed: the meta-gradient is the query loss's at theta_R with P_R
  # (Eq. 1 at theta_R), not the round state's P_{R-1}; `next` and `run_episode` agree.
  model = fixtures.tiny()
  hp = P.FewRoundHparams(rounds=2, gamma=0.5, inner_lr=0.05, local_steps=1, server_lr=0.01,
                         meta_update='server_adam', train_prototypes='recomputed')
  process = P.build_meta_training(model, hp, P.data_spec(SHAPE))
  data = fixtures.clients()[:2]
  data[1] = dict(data[1], query_y=(data[1]['query_y'] + 1) % fixtures.WAYS)
  rho = np.array([len(c['support_y']) + len(c['query_y']) for c in data], np.float64)
  state = process.initialize()
  round_state = process.start(state)
  for _ in range(hp.rounds):
    round_state, _ = process.round(round_state, data)
  protos, mask = fixtures.global_prototypes_at(model, round_state['theta'], data)
  assert not np.allclose(protos, round_state['protos'], atol=1e-3)   # P_R is not P_{R-1}
  per_client = query_grads(model, round_state['theta'], protos, mask, data)
  phi = [np.asarray(w, np.float64) for w in state['phi']]
  mean = [sum(r * g[i] for r, g in zip(rho, per_client)) / rho.sum() for i in range(len(phi))]
  want, _, _ = adam(phi, [np.zeros_like(w) for w in phi], [np.zeros_like(w) for w in phi],
                    mean, 0.01, 1)
  stepwise, _ = P.run_episode(process, state, data)
  fused, _ = process.next(state, data)
  for got_step, got_fused, w in zip(stepwise['phi'], fused['phi'], want):
    np.testing.assert_allclose(got_step, w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got_fused, w, rtol=1e-4, atol=1e-6)
  previous = P.build_meta_training(model, dataclasses.replace(hp, train_prototypes='previous'),
                                   P.data_spec(SHAPE))
  other, _ = P.run_episode(previous, state, data)
  assert max(np.abs(a - b).max() for a, b in zip(other['phi'], stepwise['phi'])) > 1e-5


def test_bad_train_prototypes_is_a_config_error():
  cfg = config_lib.load(os.path.join(REPO, 'configs/fewround/femnist62_5way_iid.toml'),
                        {'train_prototypes': 'latest'})
  with pytest.raises(ConfigError, match='train_prototypes must be one of previous, recomputed'):
    cfg.validate()
  assert config_lib.load(None, {'train_prototypes': 'recomputed'}).validate().hparams() \
      .train_prototypes == 'recomputed'
