"""Fine-tuning via one-shot FL: halving, CV split, selection and the CV score against plain TF."""

import numpy as np
import pytest
import tensorflow as tf

from tff_meta.fewround import deploy, oneshot
from tff_meta.fewround import process as P
from tests.fewround import fixtures

SHAPE, WAYS = fixtures.SHAPE, fixtures.WAYS


def episode_clients(seed=0, count=3):
  rng = np.random.default_rng(seed)
  return [fixtures.client(rng, (3, 2, 4), query=5) for _ in range(count)]


def test_halve_keeps_every_image_and_deals_classes_alternately():
  clients = episode_clients()
  halves = oneshot.halve(clients)
  assert len(halves) == 2 * len(clients)
  for k, c in enumerate(clients):
    a, b = halves[2 * k], halves[2 * k + 1]
    for part in ('support', 'query'):
      both = np.concatenate([a[f'{part}_x'], b[f'{part}_x']])
      assert sorted(map(bytes, both)) == sorted(map(bytes, c[f'{part}_x']))
      for cls in range(WAYS):
        n_a, n_b = np.sum(a[f'{part}_y'] == cls), np.sum(b[f'{part}_y'] == cls)
        assert abs(n_a - n_b) <= 1           # alternate dealing within each class
      assert len(a[f'{part}_y']) - len(b[f'{part}_y']) in (0, 1)   # ... carried across classes
    assert a['num_ways'] == b['num_ways'] == c['num_ways']


def test_one_image_per_class_still_gives_two_non_empty_halves():
  rng = np.random.default_rng(0)
  c = fixtures.client(rng, (1, 1, 1), query=3)
  a, b = oneshot.halve([c])
  np.testing.assert_array_equal(a['support_y'], [0, 2])      # dealt a, b, a across classes
  np.testing.assert_array_equal(b['support_y'], [1])
  task = oneshot.cv_split(a)
  assert len(task['support_y']) == len(task['query_y']) == 1
  first, second = oneshot._halves(np.array([4, 1, 4, 1, 1]))   # class 1: rows 1, 3, 4; 4: 0, 2
  np.testing.assert_array_equal(first, [1, 2, 4])
  np.testing.assert_array_equal(second, [0, 3])


def test_cv_split_scores_on_held_out_support_never_on_query():
  c = episode_clients()[0]
  task = oneshot.cv_split(c)
  rows = np.concatenate([task['support_x'], task['query_x']])
  assert sorted(map(bytes, rows)) == sorted(map(bytes, c['support_x']))
  assert not set(map(bytes, task['query_x'])) & set(map(bytes, c['query_x']))
  assert set(task['query_y']) <= set(task['support_y'])   # held-out classes were trained on


def test_select_keeps_the_best_and_breaks_ties_by_index():
  assert oneshot.select([0.5, 0.9, 0.5, -1.0, 0.9], 3) == [1, 4, 0]
  assert oneshot.select([0.1, 0.2], 5) == [1, 0]


@pytest.fixture(scope='module')
def linear(tff_worker):
  model = fixtures.tiny('linear')
  hp = P.FewRoundHparams(inner_lr=0.1, local_steps=2)
  spec = P.data_spec(SHAPE)
  start, round_fn, evaluate = P.build_round(model, hp, spec)
  return model, hp, spec, (start, round_fn, evaluate)


@pytest.mark.slow
def test_cv_score_is_held_out_accuracy_after_local_steps(linear, tff_context):
  model, hp, spec, (start, _, _) = linear
  tasks = [oneshot.cv_split(c) for c in oneshot.halve(episode_clients(1))]
  cv_score = oneshot.build_cv_score(model, hp, spec, start.type_signature.result)
  got = cv_score(start(model.initial_weights), tasks)

  def reference(theta, sx, sy, qx, qy, n):
    mask = tf.sequence_mask(n, WAYS, dtype=tf.float32)
    batch = P.ClientBatch(sx, sy, mask)
    loss = lambda w: model.classifier.local_loss(model, w, batch, None, None, 0.0)
    for _ in range(hp.local_steps):           # plain SGD, written out
      with tf.GradientTape() as tape:
        tape.watch(theta)
        value = loss(theta)
      theta = [w - hp.inner_lr * g for w, g in zip(theta, tape.gradient(value, theta))]
    logits = model.classifier.logits(model, theta, qx, mask)
    return tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), qy),
                                  tf.float32))

  want = [fixtures.in_graph(reference, model.initial_weights, t['support_x'], t['support_y'],
                            t['query_x'], t['query_y'], t['num_ways']) for t in tasks]
  np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=1e-6)


@pytest.mark.slow
def test_keeping_every_client_is_plain_fedavg_on_the_halves(linear, tff_context):
  model, hp, spec, computations = linear
  clients = episode_clients(2)
  everyone = oneshot.CVSelection(model, hp, spec, keep=2 * len(clients))
  got = everyone(*computations, model.initial_weights, clients, [1, 2])
  want = deploy.deploy_episode(*computations, model.initial_weights, oneshot.halve(clients),
                               [1, 2])
  assert got.keys() == want.keys()
  for r in got:
    assert got[r] == pytest.approx(want[r], abs=1e-6)
  assert [sorted(s) for s in everyone.selections[0]] == [list(range(6))] * 2


@pytest.mark.slow
def test_diverging_clients_are_never_selected(linear, tff_context):
  model, hp, spec, computations = linear
  clients = episode_clients(3, count=4)
  for c in clients[:2]:                       # their halves: clients 0-3 of the 8
    c['support_x'] = np.full_like(c['support_x'], np.nan)
  select_half = oneshot.CVSelection(model, hp, spec, keep=4)
  out = select_half(*computations, model.initial_weights, clients, [1, 2])
  assert all(np.isfinite(v) for v in out.values())
  for kept in select_half.selections[0]:
    assert len(kept) == 4 and min(kept) >= 4, kept


def _recording(fn, sizes):
  """`fn`, recording the support and query sizes of every client value handed to it."""
  def wrapped(state, data, *rest):
    sizes.extend((len(c['support_y']), len(c['query_y'])) for c in data)
    return fn(state, data, *rest)
  wrapped.type_signature = getattr(fn, 'type_signature', None)
  return wrapped


@pytest.mark.slow
def test_small_episodes_send_no_empty_batch_to_the_model(linear, tff_context):
  """One support image per class and client (examples_per_class = 2 * clients): before the
  alternation was carried across classes, every second half had no support data, and the CV
  scoring ran the model on empty batches (issue 16: a crash in group normalization)."""
  model, hp, spec, (start, round_fn, evaluate) = linear
  rng = np.random.default_rng(4)
  clients = [fixtures.client(rng, (1, 1, 1), query=3) for _ in range(2)]
  clients.append(fixtures.client(rng, (1,), query=2, classes=(1,)))   # one image: a half is empty
  halves = oneshot.halve(clients)
  assert [len(h['support_y']) for h in halves] == [2, 1, 2, 1, 1, 0]
  assert [len(h['query_y']) for h in halves] == [2, 1, 2, 1, 1, 1]
  cv_select = oneshot.CVSelection(model, hp, spec, keep=3)
  cv_sizes, round_sizes, eval_sizes = [], [], []
  cv_select._cv_score = _recording(
      oneshot.build_cv_score(model, hp, spec, start.type_signature.result), cv_sizes)
  out = cv_select(start, _recording(round_fn, round_sizes), _recording(evaluate, eval_sizes),
                  model.initial_weights, clients, [1, 2])
  assert cv_sizes == [(1, 1), (1, 1)] * 2            # halves 0 and 2: the only ones validated
  assert round_sizes and all(min(s) > 0 for s in round_sizes)
  assert len(eval_sizes) == 2 * 6 and all(q > 0 for _, q in eval_sizes)   # evaluation: queries
  assert set(out) == {1, 2}
  for kept in cv_select.selections[0]:
    assert kept == [0, 2, 1] or kept == [2, 0, 1], kept   # unvalidated halves rank last
  everyone = oneshot.CVSelection(model, hp, spec, keep=6)
  got = everyone(start, round_fn, evaluate, model.initial_weights, clients, [1])
  state, _ = round_fn(start(model.initial_weights), halves[:5])   # the empty half: weight 0
  sums = evaluate(state, halves)                                  # its query image still counts
  assert sums['num_examples'] == 3 * 2 + 2
  assert got[1] == pytest.approx(float(sums['correct']) / 8, abs=1e-6)
  assert [sorted(s) for s in everyone.selections[0]] == [[0, 1, 2, 3, 4]]
