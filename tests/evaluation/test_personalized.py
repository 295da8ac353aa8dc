"""Personalized evaluation: adapt on support only, score on query only."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams
from tff_meta.evaluation import personalized
from tff_meta.learning import inner_loop


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  return helpers.mlp_spec(), [helpers.episode(c) for c in data.test]


def _reference(weights, ep, alpha, steps, lam=0.0):
  """Plain TF, full batch: `steps` steps on the support loss (+ pFedMe's (lam/2)||w - w0||^2)."""
  w0 = [tf.constant(x) for x in weights]
  w = list(w0)
  for _ in range(steps):
    with tf.GradientTape() as tape:
      tape.watch(w)
      loss = helpers.ce(helpers.mlp_logits(w, ep['support_x']), ep['support_y'])
      loss += 0.5 * lam * tf.add_n([tf.reduce_sum(tf.square(a - b)) for a, b in zip(w, w0)])
    w = [a - alpha * g for a, g in zip(w, tape.gradient(loss, w))]
  logits = helpers.mlp_logits(w, ep['query_x'])
  correct = np.sum(np.argmax(logits.numpy(), -1) == ep['query_y'])
  loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=ep['query_y'], logits=logits)).numpy()
  return correct, loss


@pytest.mark.slow
def test_maml_evaluation_adapts_on_support_only(tff_context, setup):
  model, clients = setup
  hp = Hparams(inner_lr=0.5, inner_steps=2)
  alg = ALGORITHMS.get('fedmeta_maml')(model, hp)
  params = alg.process.initialize()['params']
  per_client = alg.evaluate(params, clients)
  for got, ep in zip(per_client, clients):
    correct, loss = _reference(model.initial_trainable, ep, 0.5, 2)
    assert got['correct'] == correct
    assert got['num_examples'] == len(ep['query_y'])
    np.testing.assert_allclose(got['loss_sum'], loss, rtol=1e-5)


@pytest.mark.slow
def test_sliced_evaluation_equals_the_full_batch_reference(tff_context, setup, monkeypatch):
  """Slices of 7 rows (`learning.inner_loop`): support sets not divisible by 7, query sets of
  many slices, and a client smaller than one slice give the full-batch scores."""
  model, clients = setup
  monkeypatch.setattr(inner_loop, 'SLICE_SIZE', 7)   # read when the computations are built
  small = collections.OrderedDict(
      support_x=clients[1]['support_x'][:3], support_y=clients[1]['support_y'][:3],
      query_x=clients[1]['query_x'][:5], query_y=clients[1]['query_y'][:5])
  episodes = [clients[0], small]
  assert len(clients[0]['support_y']) % 7 and len(clients[0]['query_y']) > 14
  for name, hp, alpha, lam in (
      ('fedmeta_maml', Hparams(inner_lr=0.5, inner_steps=2), 0.5, 0.0),
      ('pfedme', Hparams(pfedme_lambda=3.0, pfedme_personal_lr=0.2, pfedme_inner_steps=2),
       0.2, 3.0)):
    alg = ALGORITHMS.get(name)(model, hp)
    got = alg.evaluate(alg.process.initialize()['params'], episodes)
    for g, ep in zip(got, episodes):
      correct, loss = _reference(model.initial_trainable, ep, alpha, 2, lam)
      assert g['correct'] == correct and g['num_examples'] == len(ep['query_y'])
      np.testing.assert_allclose(g['loss_sum'], loss, rtol=1e-5)


def test_fedavg_is_scored_without_adaptation(tff_context, setup):
  model, clients = setup
  alg = ALGORITHMS.get('fedavg')(model, Hparams())
  params = alg.process.initialize()['params']
  got = alg.evaluate(params, clients[:2])
  for g, ep in zip(got, clients[:2]):
    correct, loss = _reference(model.initial_trainable, ep, 0.0, 0)
    assert g['correct'] == correct
    np.testing.assert_allclose(g['loss_sum'], loss, rtol=1e-5)


@pytest.mark.slow
def test_fedavg_meta_fine_tunes_on_support_minibatches(tff_context, setup):
  """FedAvg(Meta) = minibatch fine-tuning on the support set only, then the query score."""
  model, clients = setup
  hp = Hparams(client_lr=0.05, client_optimizer='sgd', batch_size=3, finetune_epochs=2)
  alg = ALGORITHMS.get('fedavg_meta')(model, hp)
  params = alg.process.initialize()['params']
  ep = clients[0]
  got = alg.evaluate(params, [ep])[0]
  w = [tf.constant(x) for x in model.initial_trainable]
  for _ in range(2):
    for i in range(0, len(ep['support_y']), 3):
      bx, by = ep['support_x'][i:i + 3], ep['support_y'][i:i + 3]
      with tf.GradientTape() as tape:
        tape.watch(w)
        loss = helpers.ce(helpers.mlp_logits(w, bx), by)
      w = [a - 0.05 * g for a, g in zip(w, tape.gradient(loss, w))]
  logits = helpers.mlp_logits(w, ep['query_x'])
  want = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=ep['query_y'], logits=logits)).numpy()
  np.testing.assert_allclose(got['loss_sum'], want, rtol=1e-5)
  # Query labels only change the score: the model is the same support-adapted one.
  flipped = dict(ep)
  flipped['query_y'] = (ep['query_y'] + 1) % 10
  want_flipped = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=flipped['query_y'], logits=logits)).numpy()
  np.testing.assert_allclose(alg.evaluate(params, [flipped])[0]['loss_sum'], want_flipped, rtol=1e-5)


def test_summary_counts_all_query_points():
  s = personalized.summarize([
      {'correct': 3.0, 'num_examples': 4.0, 'loss_sum': 1.0},
      {'correct': 1.0, 'num_examples': 6.0, 'loss_sum': 2.0}])
  assert s.accuracy == pytest.approx(0.4)        # 4 / 10 points
  assert s.client_mean == pytest.approx((0.75 + 1 / 6) / 2)
  assert s.loss == pytest.approx(0.3)
  with pytest.raises(ValueError, match='no query examples'):
    personalized.summarize([{'correct': 0.0, 'num_examples': 0.0, 'loss_sum': 0.0}])


def test_sgd_adapter_takes_meta_sgd_rates_from_params(setup):
  model, clients = setup
  ep = clients[0]
  with tf.Graph().as_default():   # TFF's functional model runs in a graph
    weights = [tf.constant(w) for w in model.initial_trainable]
    support_x, support_y = tf.constant(ep['support_x']), tf.constant(ep['support_y'])
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = helpers.ce(helpers.mlp_logits(weights, support_x), support_y)
    grads = tape.gradient(loss, weights)
    adapter = personalized.sgd_adapter(model, 0.9, 1)
    rates = [tf.fill(w.shape, 0.3) for w in weights]
    got = [adapter({'weights': weights}, support_x, support_y),
           adapter({'weights': weights, 'rates': rates}, support_x, support_y)]
    want = [[w - rate * g for w, g in zip(weights, grads)] for rate in (0.9, 0.3)]
    with tf.compat.v1.Session() as session:
      got, want = session.run((got, want))
  for g, w in zip(got, want):
    helpers.assert_rel_close(g, w, rtol=1e-5)
