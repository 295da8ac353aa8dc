"""Tests for tff_meta.data.partition (label shards, sort-and-shard, Dirichlet, IID)."""

import hashlib

import numpy as np
import pytest

from tff_meta.data import embedded
from tff_meta.data import partition
from tff_meta.data.types import ClientArrays, DataError
from tff_meta.core.registry import UnknownNameError


def _labels(per_class=60, num_classes=10, seed=0):
  """Shuffled balanced labels: `per_class` of each class."""
  y = np.repeat(np.arange(num_classes), per_class)
  return np.random.default_rng(seed).permutation(y).astype(np.int32)


def _assert_exact_cover(parts, n):
  all_idx = np.concatenate(parts)
  assert len(all_idx) == n, 'every example is assigned exactly once'
  np.testing.assert_array_equal(np.sort(all_idx), np.arange(n))


def _same(a, b):
  return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize('num_clients, k, num_classes', [(20, 2, 10), (10, 3, 10), (50, 2, 100)])
def test_label_shards_exactly_k_classes_in_equal_pieces(num_clients, k, num_classes):
  y = _labels(per_class=40, num_classes=num_classes)
  parts = partition.label_shards(y, num_clients, k, num_classes, seed=1)
  assert len(parts) == num_clients
  _assert_exact_cover(parts, len(y))
  pieces = num_clients * k // num_classes
  for idx in parts:
    classes, counts = np.unique(y[idx], return_counts=True)
    assert len(classes) == k
    assert set(counts) <= {40 // pieces, -(-40 // pieces)}  # equal pieces of a class


def test_label_shards_seeded_and_checks():
  y = _labels()
  a = partition.label_shards(y, 20, 2, 10, seed=3)
  assert _same(a, partition.label_shards(y, 20, 2, 10, seed=3))
  assert not _same(a, partition.label_shards(y, 20, 2, 10, seed=4))
  with pytest.raises(DataError, match='multiple'):
    partition.label_shards(y, 7, 2, 10, seed=0)
  with pytest.raises(DataError, match='exceeds'):
    partition.label_shards(y, 10, 11, 10, seed=0)


def test_embedded_digits_uses_moved_label_shards_unchanged():
  assert embedded.label_shards is partition.label_shards
  # Digests of load_digits' clients computed before label_shards moved here.
  expected = {
      (): '90438e3d31eb14bd',
      (('num_clients', 50), ('seed', 3)): '595ec3dc0f70e8f5',
      (('num_clients', 20), ('labels_per_client', 5), ('seed', 7)): '0fd2aeff89fdb9af',
  }
  for args, digest in expected.items():
    ds = embedded.load_digits(**dict(args))
    h = hashlib.sha256()
    for cid, c in ds.clients.items():
      h.update(cid.encode())
      h.update(c.x.tobytes())
      h.update(c.y.tobytes())
    assert h.hexdigest()[:16] == digest, args


def test_sort_and_shard_two_whole_shards_per_client():
  y = _labels(per_class=30)
  parts = partition.sort_and_shard(y, 10, shards_per_client=2, seed=5)
  _assert_exact_cover(parts, len(y))
  order = partition.shard_order(y, seed=5)
  assert np.all(np.diff(y[order]) >= 0), 'shards are cut from label-sorted order'
  position = np.empty(len(y), np.int64)
  position[order] = np.arange(len(y))
  shard_size = len(y) // 20
  for idx in parts:
    assert len(idx) == 2 * shard_size
    shards, counts = np.unique(position[idx] // shard_size, return_counts=True)
    assert len(shards) == 2 and set(counts) == {shard_size}
    assert len(np.unique(y[idx])) <= 2
  # FedAvg's numbers: 200 shards of 300 from 60,000 labels, 2 per client.
  big = partition.sort_and_shard(_labels(per_class=6000), 100, 2, seed=0)
  assert {len(p) for p in big} == {600}
  assert max(len(np.unique(_labels(per_class=6000)[p])) for p in big) <= 2


def test_sort_and_shard_seeded():
  y = _labels()
  a = partition.sort_and_shard(y, 10, 2, seed=1)
  assert _same(a, partition.sort_and_shard(y, 10, 2, seed=1))
  assert not _same(a, partition.sort_and_shard(y, 10, 2, seed=2))
  with pytest.raises(DataError, match='non-empty'):
    partition.sort_and_shard(y[:10], 10, 2, seed=0)


def test_dirichlet_sizes_sum_to_n_and_alpha_controls_skew():
  y = _labels(per_class=200)
  skewed = partition.dirichlet(y, 20, alpha=0.1, seed=0, min_size=5)
  flat = partition.dirichlet(y, 20, alpha=100.0, seed=0, min_size=5)
  for parts in (skewed, flat):
    assert sum(len(p) for p in parts) == len(y)
    _assert_exact_cover(parts, len(y))
    assert min(len(p) for p in parts) >= 5
  classes = lambda parts: np.mean([len(np.unique(y[p])) for p in parts])
  assert classes(skewed) < classes(flat) - 3
  assert _same(skewed, partition.dirichlet(y, 20, alpha=0.1, seed=0, min_size=5))
  assert not _same(skewed, partition.dirichlet(y, 20, alpha=0.1, seed=1, min_size=5))


def test_dirichlet_errors():
  y = _labels(per_class=5)
  with pytest.raises(DataError, match='lower min_size'):
    partition.dirichlet(y, 10, alpha=0.5, min_size=10)
  with pytest.raises(DataError, match='alpha'):
    partition.dirichlet(y, 10, alpha=0.0)
  with pytest.raises(DataError, match='tries'):
    partition.dirichlet(y, 10, alpha=0.01, min_size=5, max_tries=3)


def test_iid_nearly_equal_and_seeded():
  parts = partition.iid(103, 10, seed=0)
  _assert_exact_cover(parts, 103)
  assert {len(p) for p in parts} == {10, 11}
  assert _same(parts, partition.iid(103, 10, seed=0))
  assert not _same(parts, partition.iid(103, 10, seed=1))


def test_partition_by_name_returns_client_arrays():
  y = _labels()
  x = np.arange(len(y), dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
  for scheme, opts in [('label_shards', {'labels_per_client': 2}),
                       ('sort_and_shard', {'shards_per_client': 2}),
                       ('dirichlet', {'alpha': 0.5, 'min_size': 5}), ('iid', {})]:
    clients = partition.partition(x, y, scheme, 10, seed=0, id_prefix='m', **opts)
    assert list(clients) == [f'm_{i:03d}' for i in range(10)]
    assert sum(len(c) for c in clients.values()) == len(y)
    for c in clients.values():
      assert isinstance(c, ClientArrays) and c.y.dtype == np.int32
      np.testing.assert_array_equal(y[c.x[:, 0].astype(int)], c.y)  # rows stay paired
  assert set(partition.PARTITIONERS.names()) == {'label_shards', 'sort_and_shard', 'dirichlet',
                                                 'iid'}


def test_partition_errors():
  y = _labels()
  x = np.zeros((len(y), 2), np.float32)
  with pytest.raises(UnknownNameError, match='label_shards'):
    partition.partition(x, y, 'shards', 10, seed=0)
  with pytest.raises(DataError, match=r'\[0, 5\)'):
    partition.partition(x, y, 'iid', 10, seed=0, num_classes=5)
  with pytest.raises(ValueError, match='alpha'):
    partition.partition(x, y, 'iid', 10, seed=0, alpha=0.3)
  with pytest.raises(DataError, match='rows'):
    partition.partition(x[:5], y, 'iid', 10, seed=0)
