"""Tests for tff_meta.data.lazy_clients: clients read on demand equal the bulk read, and
the protocol's splits of them equal the splits of the arrays held in memory."""

import hashlib
import os
import shutil
import sqlite3

import numpy as np
import pytest

from tests.conftest import FIXTURES
from tff_meta.data import protocol, tff_native, tff_sqlite
from tff_meta.data.lazy_clients import LazyClients
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset

TFF_DIR = os.path.join(FIXTURES, 'tff')


def _bulk_emnist(folder, splits=('all_train', 'all_test')):
  """EMNIST read in bulk (`read_clients`), held in memory: the path the programs took before."""
  per_client = tff_sqlite.read_clients(os.path.join(folder, tff_native.EMNIST_FILE), splits, 0,
                                       tff_native._EMNIST_SPEC)
  clients = {cid: ClientArrays(np.concatenate([p['pixels'] for p in parts]).astype(np.float32),
                               np.concatenate([p['label'] for p in parts]).astype(np.int32))
             for cid, parts in per_client.items()}
  return FederatedDataset('emnist', clients, 62, (28, 28))


def _reference_split(arrays, p, seed, cid, known=0.0):
  """FedMeta's split written out as the eager code drew it: a permutation seeded by
  sha256(f'{seed}:{cid}'), round(p * n) first; a known client first holds out round(known * n)
  with seed + 7919. Returns (support, query, holdout or None)."""
  def draw(a, fraction, s):
    digest = hashlib.sha256(f'{s}:{cid}'.encode()).digest()
    order = np.random.default_rng(int.from_bytes(digest[:8], 'little')).permutation(len(a))
    k = int(round(fraction * len(a)))
    return a.take(np.sort(order[:k])), a.take(np.sort(order[k:]))
  held = None
  if known:
    held, arrays = draw(arrays, known, seed + 7919)
  support, query = draw(arrays, p, seed)
  return support, query, held


def _equal(a, b):
  return (a is None and b is None) or (
      a is not None and b is not None and np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)
      and a.x.dtype == b.x.dtype and a.y.dtype == b.y.dtype)


@pytest.mark.parametrize('known', [0.0, 0.25])
def test_lazy_emnist_and_its_protocol_splits_equal_the_bulk_read(known):
  lazy = tff_native.load_emnist(TFF_DIR, cache_mb=0.5)
  bulk = _bulk_emnist(TFF_DIR)
  assert isinstance(lazy.clients, LazyClients) and lazy.clients.reads == 0
  assert dict(lazy.sizes()) == bulk.sizes() and list(lazy.clients) == list(bulk.clients)
  kwargs = dict(support_fraction=0.3, min_samples=10, client_split=(0.6, 0.2, 0.2), seed=3,
                known_test_fraction=known)
  got, want = protocol.prepare(lazy, **kwargs), protocol.prepare(bulk, **kwargs)
  assert lazy.clients.reads == 0   # prepare reads no client
  assert got.summary() == want.summary()
  for part in ('train', 'validation', 'test'):
    for g, w in zip(getattr(got, part), getattr(want, part), strict=True):
      assert g.client_id == w.client_id
      ref = _reference_split(bulk.clients[g.client_id], 0.3, 3, g.client_id,
                             known if part == 'train' else 0.0)
      for arrays in (g.parts(), w.parts()):
        assert all(_equal(a, r) for a, r in zip(arrays, ref)), (part, g.client_id)
      assert _equal(g.holdout, ref[2]) and _equal(g.all, w.all)
      if part == 'train':
        for r in (1, 5):
          gr, wr = protocol.resample_split(g, 3, r), protocol.resample_split(w, 3, r)
          assert all(_equal(a, b) for a, b in zip(gr.parts(), wr.parts()))
          assert len(gr.support) == len(g.support)
          assert not _equal(gr.support, g.support) or len(g.support) < 3
        if known:
          gk, wk = g.known_split(), w.known_split()
          assert all(_equal(a, b) for a, b in zip(gk.parts(), wk.parts()))
          assert _equal(gk.query, ref[2]) and gk.holdout is None
          assert len(gk) == len(g)
  assert 0 < lazy.clients.cached_bytes <= 0.5 * 2**20 + 28 * 28 * 4 * 60


def test_lazy_emnist_single_splits_and_max_clients_equal_the_bulk_read():
  for split, names in (('train', ('all_train',)), ('test', ('all_test',))):
    lazy = tff_native.load_emnist(TFF_DIR, split=split)
    bulk = _bulk_emnist(TFF_DIR, names)
    for cid, arrays in bulk.clients.items():
      assert _equal(lazy.clients[cid], arrays), (split, cid)
  some = tff_native.load_emnist(TFF_DIR, max_clients=3)
  assert list(some.clients) == sorted(_bulk_emnist(TFF_DIR).clients)[:3]


def test_tff_layout_is_read_by_rowid_ranges():
  """TFF's files keep a client's rows together (its splits interleaved): no rowid arrays."""
  index = tff_sqlite.index_clients(os.path.join(TFF_DIR, tff_native.EMNIST_FILE),
                                   ('all_train', 'all_test'), 0)
  assert index.num_scattered == 0 and index.counts.sum() == 484
  index.close()


def test_overlapping_ranges():
  first, last = np.array([10, 1, 5, 20, 22, 30, 41]), np.array([12, 4, 9, 40, 25, 31, 50])
  assert tff_sqlite._overlapping(first, last).tolist() == [False] * 3 + [True] * 3 + [False]


def test_cache_is_bounded_least_recently_used_and_checks_counts():
  arrays = {f'c{i}': ClientArrays(np.full((10, 256), i, np.float32), np.zeros(10, np.int32))
            for i in range(4)}   # 10 KB + 40 B each
  read = []
  clients = LazyClients({c: 10 for c in arrays}, lambda c: read.append(c) or arrays[c],
                        cache_mb=25 / 1024)
  for c in ('c0', 'c1', 'c0', 'c2', 'c1', 'c0'):
    assert clients[c] is arrays[c]
  # 25 KB keeps two clients: c2 pushed out c1 (c0 was used later), c1's read pushed out c0.
  assert read == ['c0', 'c1', 'c2', 'c1', 'c0'] and clients.reads == 5
  assert clients.cached_bytes == 2 * (10 * 256 * 4 + 40)
  with pytest.raises(KeyError):
    clients['nobody']
  short = LazyClients({'c0': 9}, arrays.get, source='f.sqlite')
  with pytest.raises(DataError, match="f.sqlite: client 'c0' read 10 examples but was listed "
                     'with 9'):
    short['c0']


def test_a_bad_label_raises_when_the_client_is_read_not_at_load():
  good = ClientArrays(np.zeros((3, 1)), np.array([0, 1, 2], np.int32))
  bad = ClientArrays(np.zeros((3, 1)), np.array([0, 1, 3], np.int32))
  ds = FederatedDataset('t', LazyClients({'a': 3, 'b': 3}, {'a': good, 'b': bad}.get), 3, (1,))
  assert ds.num_examples == 6 and ds.clients['a'] is good
  with pytest.raises(DataError, match=r"t: client 'b': example 2 has label 3, outside the task's classes \[0, 3\)"):
    ds.clients['b']


def _copy_fixture(tmp_path):
  folder = tmp_path / 'tff'
  folder.mkdir()
  path = str(folder / tff_native.EMNIST_FILE)
  shutil.copyfile(os.path.join(TFF_DIR, tff_native.EMNIST_FILE), path)
  return str(folder), path


def test_clients_whose_rows_interleave_are_read_by_their_rowids(tmp_path):
  folder, path = _copy_fixture(tmp_path)
  with sqlite3.connect(path) as conn:   # re-insert the table in an interleaved row order
    rows = conn.execute('SELECT split_name, client_id, serialized_example_proto FROM examples '
                        'ORDER BY rowid').fetchall()
    conn.execute('DELETE FROM examples')
    order = np.random.default_rng(0).permutation(len(rows))
    conn.executemany('INSERT INTO examples VALUES (?, ?, ?)', [rows[i] for i in order])
  conn.close()
  lazy = tff_native.load_emnist(folder)
  bulk = _bulk_emnist(folder)
  index = tff_sqlite.index_clients(path, ('all_train', 'all_test'), 0)
  assert index.num_scattered > 0
  index.close()
  for cid, arrays in bulk.clients.items():
    assert _equal(lazy.clients[cid], arrays), cid


def test_counts_that_disagree_with_client_metadata_raise(tmp_path):
  folder, path = _copy_fixture(tmp_path)
  with sqlite3.connect(path) as conn:
    cid = conn.execute('SELECT client_id FROM examples WHERE split_name = ? ORDER BY rowid '
                       'LIMIT 1', ('all_train',)).fetchone()[0]
    conn.execute('UPDATE client_metadata SET num_examples = num_examples + 1 '
                 'WHERE client_id = ? AND split_name = ?', (cid, 'all_train'))
  conn.close()
  with pytest.raises(DataError, match=f"client '{cid}' has .* rows in split 'all_train' but "
                     'client_metadata says'):
    tff_native.load_emnist(folder)
