"""Tests for tff_meta.data.movielens on small GroupLens-format files written here."""

import numpy as np
import pytest

from tff_meta.data import movielens
from tff_meta.data.types import DataError

from tests.data.movielens_files import ITEMS, write_ml100k


def test_users_are_clients_in_time_order(tmp_path):
  ds = movielens.load_movielens(write_ml100k(tmp_path))
  assert ds.name == 'movielens100k'
  assert list(ds.clients) == ['1', '2']  # user 3 has no ratings
  assert ds.num_users == 3 and ds.num_items == 3 and ds.max_item_id == 3
  assert ds.occupations == ('other', 'technician', 'writer') and ds.num_occupations == 3
  assert ds.num_ratings == 7 and ds.titles[3] == 'Café Society (1995)'
  u1 = ds.clients['1']
  assert len(u1) == 4 and u1.ratings.dtype == np.float32
  np.testing.assert_array_equal(u1.features['timestamp'], [100, 200, 300, 400])
  np.testing.assert_array_equal(u1.features['item'], [2, 3, 1, 1])
  np.testing.assert_array_equal(u1.ratings, [3, 1, 5, 4])
  assert u1.features['genres'].shape == (4, 19)
  np.testing.assert_array_equal(np.flatnonzero(u1.features['genres'][0]), [1, 2, 16])
  np.testing.assert_array_equal(np.flatnonzero(u1.features['genres'][2]), [3, 4, 5])
  assert set(u1.features) == set(movielens.FEATURES)
  np.testing.assert_array_equal(u1.features['gender'], [0] * 4)
  np.testing.assert_array_equal(u1.features['age'], [24] * 4)
  np.testing.assert_array_equal(u1.features['occupation'], [1] * 4)
  u2 = ds.clients['2']
  np.testing.assert_array_equal(u2.features['gender'], [1] * 3)
  np.testing.assert_array_equal(u2.ratings, [2, 4, 5])
  assert list(movielens.load_movielens(str(tmp_path), min_ratings=4).clients) == ['1']
  assert list(movielens.load_movielens(str(tmp_path), max_users=1).clients) == ['1']


def test_occupation_file_fixes_ids(tmp_path):
  ds = movielens.load_movielens(write_ml100k(
      tmp_path, occupation=['writer', 'technician', 'other', 'doctor']))
  assert ds.occupations == ('writer', 'technician', 'other', 'doctor')
  assert ds.clients['1'].features['occupation'][0] == 1
  assert ds.clients['2'].features['occupation'][0] == 2


@pytest.mark.parametrize('file, lines, line_no, problem', [
    ('u.data', ['1\t1\t5\t300', '1\t2\t3'], 2, '4 tab-separated fields'),
    ('u.data', ['1\t1\t6\t300'], 1, 'outside'),
    ('u.data', ['1\t1\tfive\t300'], 1, 'not a number'),
    ('u.data', ['1\t1\t5\t300', '', '9\t1\t5\t300'], 3, 'user id 9 is not in u.user'),
    ('u.data', ['1\t7\t5\t300'], 1, 'item id 7 is not in u.item'),
    ('u.user', ['1|24|M|technician|85711', '2|x|F|other|94043'], 2, 'age'),
    ('u.user', ['1|24|X|technician|85711'], 1, 'gender'),
    ('u.user', ['1|24|M|technician'], 1, '5'),
    ('u.item', ITEMS[:1] + ['2|Bad|||url|0|1'], 2, '24'),
    ('u.item', [ITEMS[0].replace('|1|1|1|', '|1|2|1|')], 1, 'genre flags'),
])
def test_malformed_lines_name_file_and_line(tmp_path, file, lines, line_no, problem):
  write_ml100k(tmp_path)
  (tmp_path / file).write_text('\n'.join(lines) + '\n', encoding='latin-1')
  with pytest.raises(DataError) as e:
    movielens.load_movielens(str(tmp_path))
  msg = str(e.value)
  assert file in msg and f'line {line_no}' in msg and problem in msg, msg


def test_missing_files(tmp_path):
  with pytest.raises(DataError) as e:
    movielens.load_movielens(str(tmp_path))
  assert "'u.data'" in str(e.value) and 'ml-100k.zip' in str(e.value)


def test_chronological_split_last_query_and_support_just_before():
  support, query = movielens.chronological_split(10, 0.5)
  np.testing.assert_array_equal(query, [8, 9])
  np.testing.assert_array_equal(support, [3, 4, 5, 6, 7])
  support, query = movielens.chronological_split(20, 0.1, query_fraction=0.25)
  np.testing.assert_array_equal(query, np.arange(15, 20))
  np.testing.assert_array_equal(support, [13, 14])
  for n in range(2, 60):
    for p in (0.01, 0.2, 0.6, 0.8, 0.99):
      support, query = movielens.chronological_split(n, p)
      assert len(support) >= 1 and len(query) >= 1
      assert not set(support) & set(query)
      assert support[-1] + 1 == query[0] and query[-1] == n - 1
      assert np.all(np.diff(support) == 1) and np.all(np.diff(query) == 1)


def test_random_split_has_chronological_sizes_and_is_seeded():
  for n in range(2, 60):
    for p in (0.01, 0.2, 0.6, 0.8, 0.99):
      chrono = movielens.chronological_split(n, p)
      support, query = movielens.random_split(n, p, seed=[1, n])
      assert (len(support), len(query)) == tuple(len(c) for c in chrono)
      assert not set(support) & set(query) and set(support) | set(query) <= set(range(n))
      assert np.all(np.diff(support) > 0) and np.all(np.diff(query) > 0)   # each in time order
  support, query = movielens.random_split(40, 0.8, seed=7)
  again = movielens.random_split(40, 0.8, seed=7)
  np.testing.assert_array_equal(support, again[0])
  np.testing.assert_array_equal(query, again[1])
  assert not np.array_equal(query, movielens.random_split(40, 0.8, seed=8)[1])
  assert not np.array_equal(query, np.arange(32, 40))   # not the latest records
  # Over many seeds every record is in the query set about a fifth of the time.
  hits = np.zeros(10)
  for seed in range(2000):
    hits[movielens.random_split(10, 0.8, seed=seed)[1]] += 1
  np.testing.assert_allclose(hits / 2000, 0.2, atol=0.04)
  assert movielens.SPLITS.get('random') is movielens.random_split
  assert movielens.SPLITS.get('chronological') is movielens.chronological_split


@pytest.mark.parametrize('p', [0.0, 1.0, -0.2, 1.5])
def test_support_fraction_outside_unit_interval_raises(p):
  with pytest.raises(ValueError, match='support_fraction'):
    movielens.chronological_split(10, p)


def test_split_errors_and_split_user(tmp_path):
  with pytest.raises(ValueError, match='query_fraction'):
    movielens.chronological_split(10, 0.5, query_fraction=1.0)
  with pytest.raises(DataError, match='1 records'):
    movielens.chronological_split(1, 0.5)
  ds = movielens.load_movielens(write_ml100k(tmp_path))
  support, query = movielens.split_user(ds.clients['1'], 0.5)
  np.testing.assert_array_equal(query.features['timestamp'], [400])
  np.testing.assert_array_equal(support.features['timestamp'], [200, 300])
  assert query.ratings.tolist() == [4.0]


def test_selectable_by_name_with_per_user_stats(tmp_path):
  from tff_meta.data import DATASETS, load_dataset, stats  # pylint: disable=g-import-not-at-top
  folder = write_ml100k(tmp_path)
  assert 'movielens' in DATASETS
  ds = load_dataset('movielens', path=folder)
  assert isinstance(ds, movielens.RatingsDataset)
  direct = movielens.load_movielens(folder)
  assert list(ds.clients) == list(direct.clients) == ['1', '2']
  for uid, user in ds.clients.items():
    np.testing.assert_array_equal(user.ratings, direct.clients[uid].ratings)
  assert list(load_dataset('movielens', path=folder, min_ratings=4).clients) == ['1']
  with pytest.raises(DataError, match='Unknown option'):
    load_dataset('movielens', path=folder, num_clients=3)
  with pytest.raises(DataError, match='ml-100k.zip'):
    load_dataset('movielens', path=str(tmp_path / 'absent'))

  s = stats.compute_stats(ds)
  assert isinstance(s, stats.RatingsStats)
  assert (s.users, s.ratings, s.items, s.num_items) == (2, 7, 3, 3)
  assert (s.ratings_mean, s.ratings_stdev, s.ratings_min, s.ratings_max) == (3.5, 0.5, 3, 4)
  assert s.rating_mean == pytest.approx(24 / 7)
  assert s.rating_stdev == pytest.approx(np.std([5, 3, 4, 1, 2, 4, 5]))
  assert s.filtered == 0
  f = stats.compute_stats(ds, min_samples=4)
  assert (f.users, f.ratings, f.items, f.filtered, f.min_samples) == (1, 4, 3, 1, 4)
  assert f.rating_mean == pytest.approx(13 / 4)
  table = stats.format_table([s, f]).splitlines()
  assert len(table) == 4 and 'ratings/user mean' in table[0]
  assert table[2].split() == ['movielens100k', '2', '7', '3', '/', '3', '3.5', '0.5', '3', '4',
                              '3.43', '1.40']
