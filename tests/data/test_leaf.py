"""Tests for tff_meta.data.leaf on real LEAF shards (subsets in tests/fixtures/leaf) and small files."""

import glob
import json
import os
from unittest import mock

import numpy as np
import pytest

from tests.conftest import FIXTURES
from tff_meta.data import leaf
from tff_meta.data import text
from tff_meta.data.types import DataError

LEAF_DIR = os.path.join(FIXTURES, 'leaf')
FEMNIST = os.path.join(LEAF_DIR, 'femnist')
SHAKESPEARE = os.path.join(LEAF_DIR, 'shakespeare')


def _json_counts(folder):
  """user -> number of samples by the shards' num_samples (read directly)."""
  counts = {}
  for f in sorted(glob.glob(os.path.join(folder, '*.json'))):
    with open(f) as fh:
      d = json.load(fh)
    for u, n in zip(d['users'], d['num_samples']):
      counts[u] = counts.get(u, 0) + n
  return counts


@pytest.fixture(scope='module')
def femnist_all():
  return leaf.load_leaf(FEMNIST, 'femnist')


def test_femnist_all_matches_json_counts(femnist_all):
  train = _json_counts(os.path.join(FEMNIST, 'train'))
  test = _json_counts(os.path.join(FEMNIST, 'test'))
  ds = femnist_all
  assert ds.name == 'femnist' and ds.num_classes == 62
  assert len(ds.clients) == 6 == len(train) == len(test)
  assert list(ds.clients) == sorted(train)
  assert ds.num_examples == sum(train.values()) + sum(test.values()) == 90
  for u, c in ds.clients.items():
    assert len(c) == train[u] + test[u]
    assert c.x.shape[1:] == (28, 28) and c.x.dtype == np.float32
    assert c.y.dtype == np.int32
    assert c.x.min() >= 0.0 and c.x.max() <= 1.0
  assert max(c.y.max() for c in ds.clients.values()) < 62


def test_femnist_test_split_equals_tail_of_all(femnist_all):
  test = leaf.load_leaf(FEMNIST, 'femnist', split='test', max_clients=5)
  assert list(test.clients) == list(femnist_all.clients)[:5]
  for u, c in test.clients.items():
    full = femnist_all.clients[u]
    np.testing.assert_array_equal(full.x[-len(c):], c.x)
    np.testing.assert_array_equal(full.y[-len(c):], c.y)
  f = sorted(glob.glob(os.path.join(FEMNIST, 'test', '*.json')))[0]
  with open(f) as fh:
    d = json.load(fh)
  u = d['users'][0]
  one = leaf.load_leaf(f, 'femnist')
  assert len(one.clients) == len(d['users'])
  np.testing.assert_allclose(one.clients[u].x.reshape(-1, 784),
                             d['user_data'][u]['x'])
  np.testing.assert_array_equal(one.clients[u].y, d['user_data'][u]['y'])


def test_shakespeare_counts_and_same_vocab_as_text():
  train = leaf.load_leaf(SHAKESPEARE, 'shakespeare', split='train')
  test = leaf.load_leaf(SHAKESPEARE, 'shakespeare', split='test')
  assert train.num_examples == 1000 and test.num_examples == 120
  assert len(train.clients) == len(test.clients) == 4
  assert train.num_classes == 81 and train.element_shape == (80,)
  assert {u: len(c) for u, c in train.clients.items()} == _json_counts(
      os.path.join(SHAKESPEARE, 'train'))
  f = glob.glob(os.path.join(SHAKESPEARE, 'train', '*.json'))[0]
  with open(f) as fh:
    d = json.load(fh)
  u = sorted(d['users'])[0]
  c = train.clients[u]
  for i in (0, 17, len(c) - 1):
    assert text.decode_chars(c.x[i]) == d['user_data'][u]['x'][i]
    assert text.decode_chars([c.y[i]]) == d['user_data'][u]['y'][i]
  assert c.x.min() >= 1  # Full 80-char strings: no padding, no unknowns.


def _shard(users_xy, num_samples=None):
  users = list(users_xy)
  return {
      'users': users,
      'num_samples': num_samples or [len(users_xy[u][1]) for u in users],
      'user_data': {u: {'x': x, 'y': y} for u, (x, y) in users_xy.items()},
  }


def _tweet(t):
  return ['1467810369', 'Mon Apr 06 22:19:45 PDT 2009', 'NO_QUERY', 'bob', t]


def _write_json(path, obj):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(obj))
  return str(path)


@pytest.fixture
def sent140_dir(tmp_path):
  _write_json(tmp_path / 'train' / 'all_data_0_train_9.json', _shard({
      'u2': ([_tweet('Good day good'), _tweet('bad day!')], [1, 0]),
      'u1': ([_tweet('good')], [1]),
  }))
  _write_json(tmp_path / 'test' / 'all_data_0_test_9.json', _shard({
      'u2': ([_tweet('awful')], [0]),
      'u1': ([_tweet('GOOD good...')], [1]),
  }))
  return tmp_path


def test_sent140_small_files(sent140_dir):
  ds = leaf.load_leaf(str(sent140_dir), 'sent140')
  assert ds.name == 'sent140' and ds.num_classes == 2
  assert ds.element_shape == (25,)
  assert list(ds.clients) == ['u1', 'u2']
  vocab = ds.extras['vocab']
  assert vocab == {'good': 2, 'day': 3, 'awful': 4, 'bad': 5}
  u2 = ds.clients['u2']
  assert u2.x.shape == (3, 25) and u2.x.dtype == np.int32
  np.testing.assert_array_equal(u2.x[:, :3], [[2, 3, 2], [5, 3, 0], [4, 0, 0]])
  assert not u2.x[:, 3:].any()
  np.testing.assert_array_equal(u2.y, [1, 0, 0])
  train = leaf.load_leaf(str(sent140_dir), 'sent140', split='train',
                         max_vocab_size=1)
  assert train.extras['vocab'] == {'good': 2}
  np.testing.assert_array_equal(train.clients['u2'].x[:, :3],
                                [[2, 1, 2], [1, 1, 0]])
  assert 'embeddings' not in train.extras


def test_sent140_with_glove(sent140_dir, tmp_path):
  glove = tmp_path / 'glove.txt'
  glove.write_text('day 1 1\ngood 2 2\nbad 3 3\n')
  ds = leaf.load_leaf(str(sent140_dir), 'sent140', split='test',
                      glove_path=str(glove))
  assert ds.extras['vocab'] == {'day': 2, 'good': 3, 'bad': 4}
  np.testing.assert_allclose(ds.extras['embeddings'],
                             [[0, 0], [0, 0], [1, 1], [2, 2], [3, 3]])
  np.testing.assert_array_equal(ds.clients['u1'].x[0, :3], [3, 3, 0])
  np.testing.assert_array_equal(ds.clients['u2'].x[0, :2], [1, 0])  # awful.


def test_all_data_folder_and_single_file(tmp_path):
  shard = _shard({'w1': ([[0.5] * 784] * 2, [3, 61])})
  f = _write_json(tmp_path / 'all_data' / 'all_data_0.json', shard)
  for path in (f, str(tmp_path / 'all_data')):
    ds = leaf.load_leaf(path, 'femnist')
    assert ds.clients['w1'].x.shape == (2, 28, 28)
    np.testing.assert_array_equal(ds.clients['w1'].y, [3, 61])
    with pytest.raises(DataError, match='split'):
      leaf.load_leaf(path, 'femnist', split='train')


def test_malformed_json_names_file_and_position(tmp_path):
  bad = tmp_path / 'train' / 'broken.json'
  bad.parent.mkdir()
  bad.write_text('{"users": ["a"],\n "user_data": {"a": {"x": [1, 2,}}}')
  with pytest.raises(DataError) as e:
    leaf.load_leaf(str(tmp_path), 'femnist', split='train')
  msg = str(e.value)
  assert 'broken.json' in msg and 'line 2' in msg and 'column' in msg


@pytest.mark.parametrize('obj, key', [
    ({'num_samples': [], 'user_data': {}}, "'users'"),
    ({'users': [], 'num_samples': []}, "'user_data'"),
    ({'users': ['a'], 'user_data': {}}, "'a'"),
    ({'users': ['a'], 'user_data': {'a': {'y': [1]}}}, "'x'"),
    ({'users': ['a'], 'user_data': {'a': {'x': [[0.0] * 784]}}}, "'y'"),
])
def test_missing_keys(tmp_path, obj, key):
  f = _write_json(tmp_path / 'd.json', obj)
  with pytest.raises(DataError) as e:
    leaf.load_leaf(f, 'femnist')
  assert 'd.json' in str(e.value) and key in str(e.value)


def test_x_y_length_or_num_samples_mismatch_fails(tmp_path):
  f = _write_json(tmp_path / 'a.json', _shard(
      {'a': ([[0.0] * 784] * 2, [1])}))
  with pytest.raises(DataError, match='2 x but 1 y'):
    leaf.load_leaf(f, 'femnist')
  f = _write_json(tmp_path / 'b.json', _shard(
      {'a': ([[0.0] * 784] * 2, [1, 2])}, num_samples=[5]))
  with pytest.raises(DataError, match="b.json: client 'a': 2 samples where the shard's "
                     'num_samples says 5'):
    leaf.load_leaf(f, 'femnist')
  obj = _shard({'a': ([[0.0] * 784] * 2, [1, 2])})
  del obj['num_samples']
  f = _write_json(tmp_path / 'c.json', obj)
  with mock.patch.object(leaf.logging, 'warning') as warning:
    ds = leaf.load_leaf(f, 'femnist')
  assert len(ds.clients['a']) == 2
  assert warning.call_count == 1 and 'num_samples' in warning.call_args[0][0]


@pytest.mark.parametrize('task, x, y', [
    ('femnist', [[0.0] * 784], [62]),
    ('femnist', [[0.0] * 784], [-1]),
    ('femnist', [[0.0] * 784], [1.5]),
    ('sent140', [_tweet('hi')], [4]),
])
def test_labels_out_of_range(tmp_path, task, x, y):
  f = _write_json(tmp_path / 'l.json', _shard({'a': (x, y)}))
  with pytest.raises(DataError) as e:
    leaf.load_leaf(f, task)
  assert 'l.json' in str(e.value) and "'a'" in str(e.value)


def test_bad_rows_unknown_task_and_missing_path(tmp_path):
  f = _write_json(tmp_path / 'r.json', _shard({'a': ([[0.0] * 783], [1])}))
  with pytest.raises(DataError, match='784'):
    leaf.load_leaf(f, 'femnist')
  f = _write_json(tmp_path / 's.json', _shard({'a': (['abc'], ['de'])}))
  with pytest.raises(DataError, match='one character'):
    leaf.load_leaf(f, 'shakespeare')
  with pytest.raises(DataError, match='celeba'):
    leaf.load_leaf(f, 'celeba')
  with pytest.raises(DataError, match='nowhere'):
    leaf.load_leaf(str(tmp_path / 'nowhere'), 'femnist')
  with pytest.raises(DataError, match='No LEAF'):
    (tmp_path / 'empty' / 'train').mkdir(parents=True)
    leaf.load_leaf(str(tmp_path / 'empty'), 'femnist', split='train')
