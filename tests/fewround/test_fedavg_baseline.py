"""Few-round's `fedavg` baseline against the registry's FedAvg: one round, measured.

Park et al., "Few-Round Learning for Federated Learning", Sec. 4 "Comparison schemes": the
FedAvg baseline trains a randomly initialized model for R rounds, and every method is
deployed through the same round (Alg. 1 lines 5-21, `process.build_round`): E full-batch
SGD steps at alpha on the support set only, the linear head's logits masked to the episode's
tau classes (random-way tasks keep 7 slots, Sec. 4 "random-way setup"), models averaged
with weights |S_k|, prototypes averaged beside them. The registry's FedAvg
(`algorithms/fedavg.py`, FedMeta's protocol) trains on all of a client's data in minibatches
of 10 with Adam at 1e-4, weights by that data's size and takes a server SGD step at 1.0.

One round of each, from the same initial weights on the same three clients (support sets of
12, 15 and 13), E = 2, alpha = 0.1, with the registry's settings aligned with the paper's one
at a time (`registry_steps`). Measured, as ||difference|| / ||few-round update||:

    registry setting                tau = 3 of 5 slots    tau = 5 of 5
    registry defaults, all data           0.996               0.996
    + support set only (|S_k|)            0.997               0.996
    + SGD at alpha                        0.913               0.662
    + E epochs                            1.277               0.988
    + full batch                          0.496               7.7e-7

Every setting matters. With all four aligned and no class masked (N-way tasks) the two are
the same round to float tolerance, and both equal a plain-TF round; in a random-way task
(tau < slots) the class mask alone remains, half the update here, and the registry's FedAvg
cannot mask (its logits are the model's, whatever classes the task has). The global
prototypes do not enter the linear head's round.
"""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests.fewround import fixtures
from tff_meta.algorithms import ALGORITHMS
from tff_meta.fewround import baselines, config, tasks
from tff_meta.fewround import process as P
from tff_meta.models import build_model_spec

SHAPE, TAU, SLOTS = fixtures.SHAPE, fixtures.WAYS, 5   # a random-way task: tau = 3 of 5 slots
OPTIONS = dict(filters=4, blocks=2, groups=2)


@pytest.fixture(scope='module')
def setup(tff_worker):
  """The `fedavg` method's model and hparams, its round, and the registry's model."""
  cfg = dataclasses.replace(config.load(None, {'local_steps': 2}), n_way=(TAU, SLOTS),
                            model_options=OPTIONS)
  data = tasks.ClassSplitData('toy', np.zeros([6, *SHAPE], np.float32),
                              np.arange(6, dtype=np.int32) % 3, collections.OrderedDict(
                                  train=np.arange(3), validation=np.array([]),
                                  test=np.array([])))
  prepared = baselines.METHODS.get('fedavg')(baselines.Context(cfg, data))
  model, hp = prepared.model, prepared.hparams
  # The registry's model: the same conv4 with pooling and a linear layer, the same weights.
  spec = build_model_spec('conv4', SHAPE, SLOTS, seed=cfg.seed, **OPTIONS)
  spec = dataclasses.replace(spec, initial_trainable=list(prepared.weights))
  start, round_fn, _ = P.build_round(model, hp, P.data_spec(SHAPE))
  return model, hp, spec, prepared.weights, start, round_fn


def episode(num_ways):
  """Three clients with support sets of 12, 15 and 13 examples (more than the registry's
  batch of 10; labels 0-2, the last lacks class 2) and the task's num_ways."""
  rng = np.random.default_rng(0)
  clients = [fixtures.client(rng, (5, 4, 3)), fixtures.client(rng, (8, 2, 5), query=6),
             fixtures.client(rng, (6, 7), classes=(0, 1))]
  return [dict(c, num_ways=np.int32(num_ways)) for c in clients]


def registry_round(spec, hp, data):
  """One round of `ALGORITHMS.get('fedavg')`, built as the registry builds it."""
  process = ALGORITHMS.get('fedavg')(spec, hp).process
  state, _ = process.next(process.initialize(), data)
  return [np.asarray(w) for w in state['params']['weights']]


def all_data(c):
  return collections.OrderedDict(x=np.concatenate([c['support_x'], c['query_x']]),
                                 y=np.concatenate([c['support_y'], c['query_y']]))


def support(c):
  return collections.OrderedDict(x=c['support_x'], y=c['support_y'])


def reference_rounds(model, theta, episodes, lr, steps):
  """Plain TF, one graph: for each episode, per client E full-batch GD steps on the support
  set's cross-entropy with the logits outside the first num_ways slots at -1e9, then the
  |S_k|-weighted mean of the clients' weights."""
  def client(w, c):
    penalty = (1.0 - tf.sequence_mask(c['num_ways'], model.ways, dtype=tf.float32)) * -1e9
    for _ in range(steps):
      with tf.GradientTape() as tape:
        tape.watch(w)
        logits = tf.matmul(model.embed(w, c['support_x']), w[-2]) + w[-1] + penalty
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            c['support_y'], logits))
      w = [a - lr * g for a, g in zip(w, tape.gradient(loss, w))]
    return w

  def rounds(theta, episodes):
    out = []
    for data in episodes:
      sizes = [tf.cast(tf.size(c['support_y']), tf.float32) for c in data]
      trained = [client(list(theta), c) for c in data]
      out.append([tf.add_n([n * t[i] for n, t in zip(sizes, trained)]) / tf.add_n(sizes)
                  for i in range(len(theta))])
    return out
  return fixtures.in_graph(rounds, list(theta), episodes)


def relative(a, b, theta):
  """||a - b|| / ||a - theta||: the difference as a share of the round's update a."""
  flat = lambda ws: np.concatenate([np.ravel(w) for w in ws])
  return float(np.linalg.norm(flat(a) - flat(b)) / np.linalg.norm(flat(a) - flat(theta)))


def registry_steps(hp):
  """(name, registry hparams, client data) with one more of the paper's settings each time."""
  sgd = dict(client_optimizer='sgd', client_lr=hp.inner_lr)
  epochs = dict(sgd, local_epochs=hp.local_steps)
  return [('registry defaults, all data', {}, all_data),
          ('+ support set only (weights |S_k|)', {}, support),
          ('+ SGD at alpha', sgd, support),
          ('+ E epochs', epochs, support),
          ('+ full batch', dict(epochs, batch_size=64), support)]


@pytest.mark.slow
def test_registry_fedavg_equals_the_deployment_round_but_for_the_class_mask(setup, tff_context):
  model, hp, spec, theta, start, round_fn = setup
  assert (hp.inner_lr, hp.local_steps, hp.head_lr, hp.zero_head) == (0.1, 2, 0.0, False)
  masked, unmasked = episode(TAU), episode(SLOTS)
  fewround = {n: [np.asarray(w) for w in round_fn(start(theta), data)[0]['theta']]
              for n, data in ((TAU, masked), (SLOTS, unmasked))}
  # The same model: the registry's logits are the head's unmasked logits.
  registry_logits, head_logits = fixtures.in_graph(
      lambda w, x: (spec.logits(w, x), model.classifier.logits(model, w, x, tf.ones([SLOTS]))),
      list(theta), masked[0]['support_x'])
  np.testing.assert_allclose(registry_logits, head_logits, atol=1e-5)
  # Both few-round rounds are the plain-TF round.
  references = reference_rounds(model, theta, [masked, unmasked], hp.inner_lr, hp.local_steps)
  for n, reference in zip((TAU, SLOTS), references):
    for got, want in zip(fewround[n], reference):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  # The global prototypes the round state carries do not enter the linear head's round.
  rng = np.random.default_rng(1)
  with_protos = collections.OrderedDict(
      theta=list(theta), protos=rng.normal(size=(SLOTS, model.feature_dim)).astype(np.float32),
      mask=np.ones(SLOTS, np.float32), has_protos=np.float32(1.0))
  for a, b in zip(round_fn(with_protos, masked)[0]['theta'], fewround[TAU]):
    np.testing.assert_array_equal(a, b)

  rows = []
  for name, registry_hp, feed in registry_steps(hp):
    registry = registry_round(spec, registry_hp, [feed(c) for c in masked])
    rows.append((name, relative(fewround[TAU], registry, theta),
                 relative(fewround[SLOTS], registry, theta)))
  print('\nregistry FedAvg vs few-round round: ||difference|| / ||few-round update||')
  print(f'{"registry setting":38s} {"tau=3 of 5 (mask)":>18s} {"tau=5 of 5":>12s}')
  for name, with_mask, without in rows:
    print(f'{name:38s} {with_mask:18.4f} {without:12.2e}')
  mask_alone = relative(fewround[TAU], fewround[SLOTS], theta)
  print(f'{"few-round, mask vs no mask":38s} {mask_alone:18.4f}')
  # As built (Adam at 1e-4, batches of 10, all data) the registry's round barely moves theta:
  # the rounds differ by about the whole few-round update. Each setting changes the result;
  # until the last one is aligned they stay more than half an update apart.
  assert all(without > 0.5 for _, _, without in rows[:-1])
  # All four aligned, no class masked: the same round, to float tolerance.
  assert rows[-1][2] < 1e-5
  for got, want in zip(registry, fewround[SLOTS]):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  # With tau < slots the class mask alone remains: half the update here.
  assert rows[-1][1] == pytest.approx(mask_alone, rel=1e-3)
  assert mask_alone > 0.2
