"""FedPer, LG-FedAvg, FedRep, FedAvg(Meta)+FedPer and FedMeta+FedPer against plain-TF references."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, stateful

LR, BATCH = 0.1, 8


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  full = data.train[0].all
  return model, data, collections.OrderedDict(x=full.x, y=full.y)


def _sgd(weights, data, epochs, trainable):
  """Plain eager TF minibatch SGD on the test MLP; only indices in `trainable` move."""
  w = [tf.Variable(v) for v in weights]
  for _ in range(epochs):
    for start in range(0, len(data['y']), BATCH):
      with tf.GradientTape() as tape:
        loss = helpers.ce(helpers.mlp_logits(w, data['x'][start:start + BATCH]),
                          data['y'][start:start + BATCH])
      grads = tape.gradient(loss, w)
      for i in trainable:
        w[i].assign_sub(LR * grads[i])
  return [v.numpy() for v in w]


def _hp(**kw):
  return Hparams(client_optimizer='sgd', client_lr=LR, batch_size=BATCH, **kw)


def _personal(model, idx, shift):
  return [model.initial_trainable[i] + shift for i in idx]


def _state(personal, visits=1.0):
  return collections.OrderedDict(visits=np.float32(visits), personal=personal)


@pytest.mark.slow
@pytest.mark.parametrize('name, shared_idx, personal_idx', [
    ('fedper', (0, 1), (2, 3)),      # base shared, head personal
    ('fedavg_meta_fedper', (0, 1), (2, 3)),   # trains as FedPer
    ('lg_fedavg', (2, 3), (0, 1)),   # head global, representation local
])
def test_joint_training_sends_the_shared_part_and_keeps_the_rest(tff_context, setup, name,
                                                                 shared_idx, personal_idx):
  model, _, data = setup
  proc = ALGORITHMS.get(name)(model, _hp(local_epochs=2)).process
  shared = [model.initial_trainable[i] for i in shared_idx]
  personal = _personal(model, personal_idx, 0.03)
  full = [None] * 4
  for i, w in zip(shared_idx, shared):
    full[i] = w
  for i, w in zip(personal_idx, personal):
    full[i] = w
  want = _sgd(full, data, 2, range(4))
  out, new_state = proc.client_update(collections.OrderedDict(weights=shared), _state(personal), data)
  n = len(data['y'])   # FedAvg-style example weighting
  helpers.assert_rel_close(out['weighted_update']['weights'],
                           [n * (s - want[i]) for s, i in zip(shared, shared_idx)], rtol=2e-4)
  helpers.assert_rel_close(new_state['personal'], [want[i] for i in personal_idx], rtol=2e-4)
  assert new_state['visits'] == 2


@pytest.mark.slow
def test_fedrep_trains_the_head_then_the_body(tff_context, setup):
  model, _, data = setup
  proc = ALGORITHMS.get('fedrep')(model, _hp(local_epochs=1, head_epochs=2)).process
  body = model.initial_trainable[:2]
  head = _personal(model, (2, 3), 0.02)
  after_head = _sgd(body + head, data, 2, (2, 3))
  want = _sgd(after_head, data, 1, (0, 1))
  out, new_state = proc.client_update(collections.OrderedDict(weights=body), _state(head), data)
  n = len(data['y'])
  helpers.assert_rel_close(out['weighted_update']['weights'],
                           [n * (b - w) for b, w in zip(body, want[:2])], rtol=2e-4)
  helpers.assert_rel_close(new_state['personal'], after_head[2:], rtol=2e-4)


@pytest.mark.slow
def test_fedmeta_fedper_splits_the_meta_gradient(tff_context, setup):
  model, data, _ = setup
  alpha = 0.3
  proc = ALGORITHMS.get('fedmeta_fedper_maml')(model, _hp(inner_lr=alpha)).process
  ep = helpers.episode(data.train[1])
  head = _personal(model, (2, 3), 0.02)
  full = model.initial_trainable[:2] + head
  grads, _ = helpers.reference_meta_gradient(full, ep, alpha)
  out, new_state = proc.client_update(
      collections.OrderedDict(weights=model.initial_trainable[:2]), _state(head), ep)
  helpers.assert_rel_close(out['weighted_update']['weights'], grads[:2], rtol=1e-4)
  helpers.assert_rel_close(new_state['personal'], [h - LR * g for h, g in zip(head, grads[2:])],
                           rtol=1e-4)


@pytest.mark.slow
def test_known_clients_use_their_own_part_new_ones_the_best_stored(tff_context, setup):
  model, data, _ = setup
  alg = ALGORITHMS.get('fedper')(model, _hp(new_client_candidates=3))
  client = data.test[0]
  ep = helpers.episode(client)
  body = model.initial_trainable[:2]
  heads = [_personal(model, (2, 3), s) for s in (0.0, 0.05, -0.05)]
  # Make the third head clearly best on this client's support set.
  heads[2] = _sgd(body + heads[2], collections.OrderedDict(x=ep['support_x'], y=ep['support_y']),
                  5, (2, 3))[2:]
  loss = lambda head, x, y: float(helpers.ce(helpers.mlp_logits(body + head, x), y)) * len(y)
  support = [loss(h, ep['support_x'], ep['support_y']) for h in heads]
  best = heads[int(np.argmin(support))]
  candidates = stateful.stack_states([_state(h) for h in heads], 3, alg.process.initial_client_state)
  params = collections.OrderedDict(weights=body)
  new, known = alg.evaluate(params, candidates,
                            [alg.process.initial_client_state, _state(heads[1])], [ep, ep])
  np.testing.assert_allclose(new['loss_sum'], loss(best, ep['query_x'], ep['query_y']), rtol=1e-4)
  np.testing.assert_allclose(known['loss_sum'], loss(heads[1], ep['query_x'], ep['query_y']),
                             rtol=1e-4)


@pytest.mark.slow
def test_fedavg_meta_fedper_fine_tunes_the_whole_model_from_the_chosen_head(tff_context, setup):
  # report 003 Sec. 6.3's FedAvgMeta column: FedPer's training, FedAvg(Meta)'s fine-tuning
  model, data, _ = setup
  epochs = 2
  alg = ALGORITHMS.get('fedavg_meta_fedper')(
      model, _hp(new_client_candidates=2, finetune_epochs=epochs))
  ep = helpers.episode(data.test[0])
  support = collections.OrderedDict(x=ep['support_x'], y=ep['support_y'])
  body = model.initial_trainable[:2]
  heads = [_personal(model, (2, 3), 0.05), _personal(model, (2, 3), -0.05)]
  loss = lambda w, x, y: float(helpers.ce(helpers.mlp_logits(w, x), y)) * len(y)
  best = heads[int(np.argmin([loss(body + h, support['x'], support['y']) for h in heads]))]
  tuned = lambda head: _sgd(body + head, support, epochs, range(4))   # every layer moves
  candidates = stateful.stack_states([_state(h) for h in heads], 2, alg.process.initial_client_state)
  new, known = alg.evaluate(collections.OrderedDict(weights=body), candidates,
                            [alg.process.initial_client_state, _state(heads[1])], [ep, ep])
  np.testing.assert_allclose(new['loss_sum'], loss(tuned(best), ep['query_x'], ep['query_y']),
                             rtol=2e-4)
  np.testing.assert_allclose(known['loss_sum'],
                             loss(tuned(heads[1]), ep['query_x'], ep['query_y']), rtol=2e-4)


@pytest.mark.parametrize('hparams, message', [
    (dict(personal_layers='7'), 'names no layer'),
    (dict(personal_layers='0,1'), 'leaves no shared layer'),
    (dict(new_client_candidates=0), 'new_client_candidates must be >= 1'),
    (dict(local_epochs=0), 'local_epochs and batch_size >= 1'),
])
def test_bad_hparams_are_named(hparams, message):
  with pytest.raises(ValueError, match=message):
    ALGORITHMS.get('fedper')(helpers.mlp_spec(), Hparams(**hparams))
