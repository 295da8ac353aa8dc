"""The data check (tff_meta/data/checks.py) on files of every format the tests write.

A NaN and an infinity in each format (TFF's EMNIST sqlite read on demand, LEAF
JSON, image files split into clients, MovieLens, data built in memory), a
pixel outside [0, 1], a label out of range, a LEAF user listed twice in one
shard, and the opt-in that drops bad clients instead.
"""

import json
import os

import numpy as np
import pytest

from tests.data.movielens_files import write_ml100k
from tests.data.sql_client_data import write_emnist_file
from tff_meta.data import checks, load_dataset
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset

BAD_VALUES = {'nan': np.nan, 'inf': np.inf, '-inf': -np.inf}


# --------------------------------------------------------------------------- the check itself

def test_feature_problem_names_the_first_bad_example_and_place():
  x = np.full((4, 2, 3), 0.5, np.float32)
  assert checks.feature_problem(x, (2, 3), None, (0.0, 1.0)) is None
  x[2, 1, 0] = np.nan
  x[3, 0, 0] = np.inf
  assert checks.feature_problem(x, (2, 3), None, None) == (
      'example 2 has nan at feature (1, 0) (features must be finite)')
  x[2, 1, 0] = 0.5
  x[1, 0, 2] = 1.5
  assert checks.feature_problem(x, (2, 3), None, (0.0, 1.0)) == (
      "example 1 has 1.5 at feature (0, 2), outside the format's range [0, 1]")
  assert 'shape (2, 3), expected (6,)' in checks.feature_problem(x, (6,), None, None)
  assert 'dtype float32 where the other clients have float64' in checks.feature_problem(
      x, (2, 3), np.dtype(np.float64), None)
  assert 'not numbers' in checks.feature_problem(x.astype(object), (2, 3), None, None)


def test_label_problem():
  assert checks.label_problem(np.array([0, 2], np.int32), 3, 2) is None
  assert checks.label_problem(np.array([0, 3, -1]), 3, 3) == (
      "example 1 has label 3, outside the task's classes [0, 3)")
  assert 'not integers' in checks.label_problem(np.array([0.0, 1.0]), 3, 2)
  assert 'one integer label per example' in checks.label_problem(np.zeros((2, 1), int), 3, 2)


def _ds(clients, **kwargs):
  return FederatedDataset('gen', clients, 3, (2,), source='made.npz', **kwargs)


@pytest.mark.parametrize('value', sorted(BAD_VALUES))
def test_generated_data_in_memory(value):
  good = ClientArrays(np.zeros((2, 2), np.float32), np.array([0, 1], np.int32))
  bad = ClientArrays(np.array([[0, 0], [0, BAD_VALUES[value]]], np.float32),
                     np.array([0, 1], np.int32))
  with pytest.raises(DataError) as e:
    _ds({'a': good, 'b': bad, 'c': bad})
  assert str(e.value).startswith(f"made.npz: client 'b': example 1 has {BAD_VALUES[value]} at "
                                 'feature (1,) (features must be finite) (2 clients fail')
  assert 'drop_bad_clients = true' in str(e.value)
  with checks.dropping_bad_clients():
    ds = _ds({'a': good, 'b': bad, 'c': bad})
  assert list(ds.clients) == ['a']
  with checks.dropping_bad_clients(), pytest.raises(DataError, match='leaves none'):
    _ds({'b': bad})


def test_clients_of_another_dtype_or_shape_fail():
  a = ClientArrays(np.zeros((2, 2), np.float32), np.array([0, 1], np.int32))
  b = ClientArrays(np.zeros((2, 2), np.float64), np.array([0, 1], np.int32))
  with pytest.raises(DataError, match="client 'b': features of dtype float64"):
    _ds({'a': a, 'b': b})
  c = ClientArrays(np.zeros((2, 3), np.float32), np.array([0, 1], np.int32))
  with pytest.raises(DataError, match=r"client 'c': examples of shape \(3,\), expected \(2,\)"):
    _ds({'a': a, 'c': c})


# --------------------------------------------------------------------------- TFF sqlite

def _emnist_file(folder, bad_client=None, value=np.nan, label=None):
  """3 clients x 4 images; `bad_client`'s image 2 gets `value` at pixel (2, 2), or `label`."""
  path = write_emnist_file(str(folder), 3, 4, bad_client, None if label is not None else value,
                           label)
  return os.path.dirname(path)


@pytest.mark.parametrize('value', sorted(BAD_VALUES) + ['2.0'])
def test_tff_sqlite_checks_a_client_when_it_is_first_read(tmp_path, value):
  number = BAD_VALUES.get(value, 2.0)
  folder = _emnist_file(tmp_path / 'tff', 'w01', number)
  ds = load_dataset('emnist', cache_dir=folder, download=False)   # only the index at start
  assert ds.clients['w00'].x.shape == (4, 28, 28)
  for _ in range(2):   # not cached: every read raises
    with pytest.raises(DataError) as e:
      ds.clients['w01']
    message = str(e.value)
    assert message.startswith(f"{folder}/emnist_all.sqlite: client 'w01': example 2 has "
                              f'{np.float32(number)} at feature (2, 2)')
    assert ('outside the format\'s range [0, 1]' if value == '2.0' else
            'features must be finite') in message
  dropped = load_dataset('emnist', cache_dir=folder, download=False, drop_bad_clients=True)
  assert list(dropped.clients) == ['w00', 'w02'] and dropped.num_examples == 8


def test_tff_sqlite_label_out_of_range(tmp_path):
  folder = _emnist_file(tmp_path / 'tff', 'w02', label=62)
  ds = load_dataset('emnist', cache_dir=folder, download=False)
  with pytest.raises(DataError, match="client 'w02': example 2 has label 62, outside the task's "
                     r'classes \[0, 62\)'):
    ds.clients['w02']


# --------------------------------------------------------------------------- LEAF JSON

def _leaf(tmp_path, users, user_data, name='all_data_0.json', num_samples=None):
  path = tmp_path / 'leaf' / name
  path.parent.mkdir(parents=True, exist_ok=True)
  text = json.dumps({'users': users,
                     'num_samples': num_samples or [len(user_data[u]['y']) for u in users],
                     'user_data': user_data})
  path.write_text(text.replace('"NaN_HERE"', 'NaN').replace('"INF_HERE"', 'Infinity'))
  return str(path)


@pytest.mark.parametrize('token', ['NaN_HERE', 'INF_HERE'])
def test_leaf_nan_and_inf_name_the_shard_user_and_sample(tmp_path, token):
  row = [0.5] * 784
  bad = list(row)
  bad[30] = token
  f = _leaf(tmp_path, ['u1', 'u2'], {'u1': {'x': [row], 'y': [1]},
                                     'u2': {'x': [row, bad], 'y': [1, 2]}})
  with pytest.raises(DataError) as e:
    load_dataset('leaf_femnist', path=f)
  value = 'nan' if token == 'NaN_HERE' else 'inf'
  assert str(e.value).startswith(f"{f}: client 'u2': sample 1 has {value} at feature (1, 2)")
  ds = load_dataset('leaf_femnist', path=f, drop_bad_clients=True)
  assert list(ds.clients) == ['u1']


def test_leaf_pixel_out_of_range_and_label_out_of_range(tmp_path):
  row = [0.5] * 784
  f = _leaf(tmp_path, ['u1'], {'u1': {'x': [row, [255.0] * 784], 'y': [1, 2]}})
  with pytest.raises(DataError, match=r"client 'u1': sample 1 has 255.0 at feature \(0, 0\), "
                     r"outside the format's range \[0, 1\]"):
    load_dataset('leaf_femnist', path=f)
  f = _leaf(tmp_path, ['u1'], {'u1': {'x': [row], 'y': [62]}}, name='l.json')
  with pytest.raises(DataError, match=r"l.json: client 'u1': sample 0 has label 62, outside"):
    load_dataset('leaf_femnist', path=f)


def test_leaf_user_listed_twice_in_a_shard(tmp_path):
  row = [0.5] * 784
  f = _leaf(tmp_path, ['u1', 'u2', 'u1'], {'u1': {'x': [row], 'y': [1]},
                                           'u2': {'x': [row], 'y': [1]}})
  with pytest.raises(DataError) as e:
    load_dataset('leaf_femnist', path=f)
  assert str(e.value).startswith(f"{f}: client 'u1': the shard's users list it 2 times "
                                 '(positions 0, 2)')
  ds = load_dataset('leaf_femnist', path=f, drop_bad_clients=True)
  assert list(ds.clients) == ['u2'] and len(ds.clients['u2']) == 1
  # Two user_data entries for one user (JSON keeps the last one silently).
  path = tmp_path / 'dup.json'
  path.write_text('{"users": ["u1"], "num_samples": [1], "user_data": {"u1": {"x": [[0.5]], '
                  '"y": [1]}, "u1": {"x": [[0.5]], "y": [1]}}}')
  with pytest.raises(DataError, match="client 'u1': the shard's user_data has two entries"):
    load_dataset('leaf_femnist', path=str(path))


# --------------------------------------------------------------------------- image files

@pytest.mark.parametrize('value', sorted(BAD_VALUES))
def test_image_files(tmp_path, value):
  x = np.full((40, 28, 28), 0.5, np.float32)
  x[7, 3, 4] = BAD_VALUES[value]
  y = np.arange(40) % 10
  np.savez(tmp_path / 'mnist.npz', x_train=x, y_train=y, x_test=x[:4], y_test=y[:4])
  with pytest.raises(DataError) as e:
    load_dataset('mnist', data_dir=str(tmp_path), partition='iid', num_clients=4)
  assert f'at feature (3, 4) (features must be finite)' in str(e.value)
  assert str(tmp_path) in str(e.value)
  ds = load_dataset('mnist', data_dir=str(tmp_path), partition='iid', num_clients=4,
                    drop_bad_clients=True)
  assert len(ds.clients) == 3


# --------------------------------------------------------------------------- MovieLens

@pytest.mark.parametrize('rating', ['nan', 'inf', '6'])
def test_movielens_rating_not_finite_or_out_of_range(tmp_path, rating):
  from tests.data.movielens_files import RATINGS  # pylint: disable=g-import-not-at-top
  lines = ['\t'.join(map(str, r)) for r in RATINGS]
  lines[3] = lines[3].replace('\t1\t', f'\t{rating}\t')
  folder = write_ml100k(tmp_path / 'ml', ratings=lines)
  with pytest.raises(DataError, match=f'u.data.*line 4.*rating {rating}'):
    load_dataset('movielens', path=folder)


def test_ratings_dataset_check():
  from tff_meta.data import movielens  # pylint: disable=g-import-not-at-top
  RatingsDataset, UserRatings = movielens.RatingsDataset, movielens.UserRatings
  def user(ratings):
    n = len(ratings)
    return UserRatings({'item': np.arange(n, dtype=np.int32),
                        'genres': np.zeros((n, 19), np.float32)}, np.array(ratings, np.float32))
  with pytest.raises(DataError, match="client '2': example 1 has nan"):
    RatingsDataset('gen', {'1': user([1, 5]), '2': user([3, np.nan])}, 2, 2, 2, ('a',))
  with checks.dropping_bad_clients():
    ds = RatingsDataset('gen', {'1': user([1, 5]), '2': user([3, 0.5])}, 2, 2, 2, ('a',))
  assert list(ds.clients) == ['1']


def test_drop_option_is_a_boolean_every_loader_takes():
  with pytest.raises(DataError, match='drop_bad_clients must be true or false'):
    load_dataset('digits', drop_bad_clients='yes')
  assert len(load_dataset('digits', drop_bad_clients=True).clients) == 100
  with pytest.raises(DataError, match='drop_bad_clients'):
    load_dataset('digits', bogus=1)
