"""Tests for tff_meta.data.episodes (FRL class splits and N-way federated episodes)."""

import numpy as np
import pytest

from tff_meta.data import episodes
from tff_meta.data.types import DataError
from tff_meta.data import client_data


def _dataset(num_classes=20, per_class=130, seed=0):
  """x[i] = [i, label]: an example's identity and label can be read back from x."""
  y = np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))
  x = np.stack([np.arange(len(y)), y], axis=1).astype(np.float32)
  return x, y.astype(np.int32)


def test_class_split_cifar100_64_16_20():
  train, val, test = episodes.class_split(100, seed=0)
  assert (len(train), len(val), len(test)) == (64, 16, 20)
  union = np.concatenate([train, val, test])
  np.testing.assert_array_equal(np.sort(union), np.arange(100))
  again = episodes.class_split(100, seed=0)
  assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again))
  other = episodes.class_split(100, seed=1)
  assert not np.array_equal(train, other[0])


def test_class_split_proportions_and_errors():
  parts = episodes.class_split(10, (0.6, 0.2, 0.2), seed=0)
  assert [len(p) for p in parts] == [6, 2, 2]
  assert [len(p) for p in episodes.class_split(10, (64, 16, 20))] == [6, 2, 2]
  assert [len(p) for p in episodes.class_split(20, (12, 4, 4))] == [12, 4, 4]
  with pytest.raises(ValueError, match='at least one class'):
    episodes.class_split(3, (0.9, 0.05, 0.05))
  with pytest.raises(ValueError, match='3 non-negative'):
    episodes.class_split(10, (0.5, 0.5))


def _check_task(clients, x, y, n, per_class=120):
  all_ids = []
  for c in clients:
    s_ids, q_ids = c.support.x[:, 0].astype(int), c.query.x[:, 0].astype(int)
    assert not set(s_ids) & set(q_ids), 'support and query overlap'
    all_ids.extend(s_ids)
    all_ids.extend(q_ids)
    for part in (c.support, c.query):
      assert part.y.dtype == np.int32 and part.y.min() >= 0 and part.y.max() < n
    # Per class: support gets half (the extra one when odd).
    for label in np.unique(np.concatenate([c.support.y, c.query.y])):
      ns, nq = np.sum(c.support.y == label), np.sum(c.query.y == label)
      assert ns - nq in (0, 1)
  assert len(all_ids) == len(set(all_ids)) == n * per_class
  ids = np.array(all_ids)
  original = y[ids]
  # The relabelling is a bijection from n original classes to 0..n-1.
  labels = np.concatenate([np.concatenate([c.support.y, c.query.y]) for c in clients])
  pairs = set(zip(original.tolist(), labels.tolist()))
  assert len(pairs) == n and len({p[0] for p in pairs}) == n
  assert np.all(x[ids, 1] == original)


def test_iid_five_way_like_frl():
  x, y = _dataset()
  classes = np.arange(12)
  clients = episodes.sample_task(x, y, classes, n_way=5, seed=3)
  assert len(clients) == 10 and clients[0].client_id == 'task_client_00'
  _check_task(clients, x, y, 5)
  for c in clients:  # 12 images of each of the 5 classes: 6 support + 6 query
    assert np.bincount(c.support.y, minlength=5).tolist() == [6] * 5
    assert np.bincount(c.query.y, minlength=5).tolist() == [6] * 5
  drawn = {int(v) for c in clients for v in y[c.support.x[:, 0].astype(int)]}
  assert drawn <= set(classes)


def test_non_iid_sort_and_shard_two_shards_per_client():
  x, y = _dataset()
  clients = episodes.sample_task(x, y, np.arange(20), n_way=5, iid=False, seed=0)
  _check_task(clients, x, y, 5)
  for c in clients:  # 20 shards of 30, 2 per client: 60 images, <= 2 classes
    assert len(c) == 60
    assert len(np.unique(np.concatenate([c.support.y, c.query.y]))) <= 2
    assert len(c.support) == len(c.query) == 30


def test_random_way_and_seeds():
  x, y = _dataset()
  ways = set()
  for s in range(30):
    clients = episodes.sample_task(x, y, np.arange(20), n_way=(3, 7), seed=(0, s),
                                   iid=bool(s % 2))
    n = int(max(max(c.support.y.max(), c.query.y.max()) for c in clients)) + 1
    assert 3 <= n <= 7
    _check_task(clients, x, y, n)
    ways.add(n)
  assert len(ways) >= 4
  a = episodes.sample_task(x, y, np.arange(20), seed=7)
  b = episodes.sample_task(x, y, np.arange(20), seed=7)
  c = episodes.sample_task(x, y, np.arange(20), seed=8)
  assert all(np.array_equal(p.support.x, q.support.x) for p, q in zip(a, b))
  assert not all(np.array_equal(p.support.x, q.support.x) for p, q in zip(a, c))


def test_episode_feeds_round_data():
  x, y = _dataset()
  clients = episodes.sample_task(x, y, np.arange(20), n_way=5, seed=0)
  data = client_data.round_data('episode', clients, seed=0, round_num=0)
  assert len(data) == 10 and data[0]['support_x'].shape == (30, 2)


def test_errors():
  x, y = _dataset(per_class=50)
  with pytest.raises(DataError, match='examples_per_class'):
    episodes.sample_task(x, y, np.arange(20), seed=0)
  with pytest.raises(DataError, match='only 3'):
    episodes.sample_task(x, y, np.arange(3), n_way=5, examples_per_class=20)
  with pytest.raises(DataError, match='num_clients'):
    episodes.sample_task(x, y, np.arange(20), examples_per_class=5)
  with pytest.raises(ValueError, match='range'):
    episodes.sample_task(x, y, np.arange(20), n_way=(7, 3), examples_per_class=20)


def test_odd_counts_give_support_the_extra_example():
  x, y = _dataset()
  clients = episodes.sample_task(x, y, np.arange(20), n_way=3, examples_per_class=50, seed=0)
  for c in clients:  # 5 of each class per client: 3 support + 2 query
    assert np.bincount(c.support.y).tolist() == [3, 3, 3]
    assert np.bincount(c.query.y).tolist() == [2, 2, 2]
