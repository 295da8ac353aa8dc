"""Tests for tff_meta.data.tff_native on real TFF sqlite files (subsets in tests/fixtures/tff)."""

import os
import sqlite3

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import FIXTURES
from tff_meta.data import text
from tff_meta.data import tff_native
from tff_meta.data.types import DataError

TFF_DIR = os.path.join(FIXTURES, 'tff')
EMNIST = os.path.join(TFF_DIR, 'emnist_all.sqlite')
SHAKESPEARE = os.path.join(TFF_DIR, 'shakespeare.sqlite')


def _metadata(path, split):
  """client id -> num_examples, read straight from the sqlite metadata."""
  with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as conn:
    return dict(conn.execute(
        'SELECT client_id, num_examples FROM client_metadata '
        'WHERE split_name = ?', (split,)).fetchall())


@pytest.fixture(scope='module')
def emnist_all():
  return tff_native.load_emnist(TFF_DIR)


def test_emnist_all_counts_shapes_and_labels(emnist_all):
  train = _metadata(EMNIST, 'all_train')
  test = _metadata(EMNIST, 'all_test')
  ds = emnist_all
  assert ds.name == 'emnist' and ds.num_classes == 62
  assert ds.element_shape == (28, 28)
  assert len(ds.clients) == 12
  assert list(ds.clients) == sorted(ds.clients)
  assert ds.num_examples == 484 == sum(train.values()) + sum(test.values())
  for cid, c in ds.clients.items():
    assert len(c) == train.get(cid, 0) + test.get(cid, 0), cid
    assert c.x.shape[1:] == (28, 28) and c.x.dtype == np.float32
    assert c.y.dtype == np.int32
  y = np.concatenate([c.y for c in ds.clients.values()])
  x = np.concatenate([c.x for c in ds.clients.values()])
  assert y.min() == 0 and y.max() == 61
  assert x.min() >= 0.0 and x.max() == 1.0 and x.mean() > 0.8  # 1 = background.


@pytest.mark.parametrize('split, meta_split, total', [
    ('train', 'all_train', 426), ('test', 'all_test', 58)])
def test_emnist_single_split_counts(split, meta_split, total):
  ds = tff_native.load_emnist(TFF_DIR, split=split)
  meta = _metadata(EMNIST, meta_split)
  assert ds.num_examples == total
  assert {cid: len(c) for cid, c in ds.clients.items()} == meta


def test_emnist_only_digits_and_max_clients():
  ds = tff_native.load_emnist(TFF_DIR, only_digits=True)
  assert ds.num_classes == 10 and len(ds.clients) == 12
  assert ds.num_examples == 120 == sum(_metadata(EMNIST, 'digits_only_train').values()) + sum(
      _metadata(EMNIST, 'digits_only_test').values())
  assert max(c.y.max() for c in ds.clients.values() if len(c)) == 9
  small = tff_native.load_emnist(TFF_DIR, max_clients=3)
  assert list(small.clients) == sorted(_metadata(EMNIST, 'all_train'))[:3]


def test_emnist_equals_tff_create_tf_dataset_for_client(emnist_all):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  train, test = tff.simulation.datasets.emnist.load_data(
      only_digits=False, cache_dir=TFF_DIR)
  for cid in (train.client_ids[0], train.client_ids[-1]):
    rows = (list(train.create_tf_dataset_for_client(cid).as_numpy_iterator())
            + list(test.create_tf_dataset_for_client(cid).as_numpy_iterator()))
    got = emnist_all.clients[cid]
    np.testing.assert_array_equal(got.x, np.stack([r['pixels'] for r in rows]))
    np.testing.assert_array_equal(got.y, np.array([r['label'] for r in rows]))


def test_missing_sqlite_names_file_and_downloads_nothing(tmp_path):
  with pytest.raises(DataError) as e:
    tff_native.load_emnist(str(tmp_path), only_digits=True, download=False)
  assert os.path.join(str(tmp_path), 'emnist_all.sqlite') in str(e.value)
  assert 'copy' in str(e.value)
  with pytest.raises(DataError, match='shakespeare.sqlite'):
    tff_native.load_shakespeare(str(tmp_path / 'nonexistent'), download=False)
  assert not os.listdir(tmp_path)
  assert not os.path.exists(tmp_path / 'nonexistent')


def test_missing_sqlite_default_cache_dir_is_home_tff(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))
  with pytest.raises(DataError) as e:
    tff_native.load_emnist(None, download=False)
  assert os.path.join(str(tmp_path), '.tff', 'emnist_all.sqlite') in str(
      e.value)
  assert not os.path.exists(tmp_path / '.tff')


def test_bad_sqlite_file_and_bad_split(tmp_path):
  (tmp_path / 'emnist_all.sqlite').write_bytes(b'not a database' * 100)
  with pytest.raises(DataError, match='emnist_all.sqlite'):
    tff_native.load_emnist(str(tmp_path))
  with pytest.raises(DataError, match='split'):
    tff_native.load_emnist(TFF_DIR, split='validation')


def _snippets(split, cid):
  with sqlite3.connect(f'file:{SHAKESPEARE}?mode=ro', uri=True) as conn:
    blobs = [r[0] for r in conn.execute(
        'SELECT serialized_example_proto FROM examples WHERE client_id = ? '
        'AND split_name = ? ORDER BY rowid', (cid, split))]
  out = []
  for b in blobs:
    ex = tf.train.Example.FromString(b)
    out.append(ex.features.feature['snippets'].bytes_list.value[0]
               .decode('utf-8'))
  return out


def _expected_windows(snippets, n=80):
  xs, ys = [], []
  for s in snippets:
    if len(s) < 2:
      continue
    if len(s) < n + 1:
      s = '\0' * (n + 1 - len(s)) + s  # '\0' encodes to the pad id 0.
    for i in range(len(s) - n):
      xs.append(text.encode_chars(s[i:i + n]))
      ys.append(text.encode_chars(s[i + n])[0])
  return np.array(xs, np.int32).reshape(-1, n), np.array(ys, np.int32)


def test_shakespeare_windows_match_snippets():
  ds = tff_native.load_shakespeare(TFF_DIR, max_clients=4)
  assert ds.name == 'shakespeare' and ds.num_classes == 81
  assert ds.element_shape == (80,)
  assert list(ds.clients) == sorted(_metadata(SHAKESPEARE, 'train'))[:4]
  for cid, c in ds.clients.items():
    x, y = _expected_windows(_snippets('train', cid) + _snippets('test', cid))
    assert len(c) > 0
    np.testing.assert_array_equal(c.x, x)
    np.testing.assert_array_equal(c.y, y)
    assert c.x.dtype == np.int32 and c.y.dtype == np.int32


def test_shakespeare_equals_tff_client_data():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  train, _ = tff.simulation.datasets.shakespeare.load_data(cache_dir=TFF_DIR)
  cid = train.client_ids[1]
  snippets = [r['snippets'].decode('utf-8') for r in
              train.create_tf_dataset_for_client(cid).as_numpy_iterator()]
  got = tff_native.load_shakespeare(TFF_DIR, split='train', max_clients=2)
  x, y = _expected_windows(snippets)
  np.testing.assert_array_equal(got.clients[cid].x, x)
  np.testing.assert_array_equal(got.clients[cid].y, y)


def test_shakespeare_full_test_split_client_count():
  ds = tff_native.load_shakespeare(TFF_DIR, split='test', stride=80)
  assert len(ds.clients) == 36
  assert set(ds.clients) == set(_metadata(SHAKESPEARE, 'test'))
  y = np.concatenate([c.y for c in ds.clients.values()])
  assert y.min() >= 1 and y.max() <= 80  # All characters are in the vocab.
