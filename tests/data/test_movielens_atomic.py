"""Tests for tff_meta.data.movielens_atomic: RecBole's atomic files load as GroupLens' files do."""

import numpy as np
import pytest

from tff_meta.data import movielens
from tff_meta.data.types import DataError
from tests.data.movielens_files import RATINGS, write_ml100k

# The same users, movies and ratings as test_movielens' GroupLens files, in RecBole's layout
# (columns reordered on purpose: they are found by name; float ratings and timestamps).
USER = ['user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token',
        '1\t24\tM\ttechnician\t85711', '2\t53\tF\tother\t94043', '3\t23\tM\twriter\t32067']
ITEM = ['item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq',
        "1\tToy Story\t1995\tAnimation Children's Comedy",
        '2\tGoldenEye\t1995\tAction Adventure Thriller',
        '3\tCafé Society\t1995\tDrama']


def inter_lines(ratings=RATINGS):
  return ['item_id:token\tuser_id:token\ttimestamp:float\trating:float'] + [
      f'{i}\t{u}\t{t}.0\t{r}.0' for u, i, r, t in ratings]


INTER = inter_lines()


def write_atomic(folder, user=USER, item=ITEM, inter=INTER, name='ml-100k'):
  folder.mkdir(parents=True, exist_ok=True)
  for suffix, lines in (('.user', user), ('.item', item), ('.inter', inter)):
    if lines is not None:
      (folder / f'{name}{suffix}').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  return str(folder)


def test_atomic_files_load_like_grouplens_files(tmp_path):
  atomic = movielens.load_movielens(write_atomic(tmp_path / 'atomic'))
  grouplens = movielens.load_movielens(write_ml100k(tmp_path / 'grouplens'))
  assert list(atomic.clients) == list(grouplens.clients) == ['1', '2']
  assert atomic.occupations == grouplens.occupations
  assert (atomic.num_users, atomic.num_items, atomic.max_item_id) == (3, 3, 3)
  for user in atomic.clients:
    a, g = atomic.clients[user], grouplens.clients[user]
    np.testing.assert_array_equal(a.ratings, g.ratings)
    assert a.ratings.dtype == np.float32
    for key in movielens.FEATURES:
      np.testing.assert_array_equal(a.features[key], g.features[key], err_msg=key)
  assert atomic.titles[3] == 'Café Society'
  # the same data in either format, at any path: one fingerprint; one changed rating: another
  assert atomic.fingerprint() == grouplens.fingerprint()
  assert len(atomic.fingerprint()) == 16
  user, item, rating, time = RATINGS[-1]
  changed = inter_lines(list(RATINGS[:-1]) + [(user, item, 6 - rating, time)])   # one rating changed
  other = movielens.load_movielens(write_atomic(tmp_path / 'changed', inter=changed))
  assert other.fingerprint() != atomic.fingerprint()


def test_atomic_files_are_read_before_grouplens_files_in_one_folder(tmp_path):
  write_ml100k(tmp_path)
  write_atomic(tmp_path, inter=INTER[:3])   # two ratings only
  assert movielens.load_movielens(str(tmp_path)).num_ratings == 2


@pytest.mark.parametrize('kwargs, problem', [
    (dict(inter=INTER[:1]), 'no rows after the header'),
    (dict(inter=['user_id:token\titem_id:token\trating:float'] + ['1\t1\t5']), "no column ['timestamp']"),
    (dict(inter=INTER[:1] + ['1\t1\t100']), 'line 2: 3 tab-separated fields, the header has 4'),
    (dict(inter=INTER[:1] + ['1\t1\t100\t6.0']), 'line 2: rating 6.0 is outside [1, 5]'),
    (dict(inter=INTER[:1] + ['9\t1\t100\t4']), 'line 2: item id 9 is not in the .item file'),
    (dict(inter=INTER[:1] + ['1\t7\t100\t4']), 'line 2: user id 7 is not in the .user file'),
    (dict(inter=INTER[:1] + ['1\t1\tsoon\t4']), "line 2: timestamp 'soon' is not a number"),
    (dict(user=USER + ['1\t30\tM\tother\t1']), 'line 5: user id 1 appears twice'),
    (dict(user=USER[:1] + ['1\t30\tX\tother\t1']), "gender must be one of ['F', 'M']"),
    (dict(item=ITEM + ['4\tNew\t1999\tCartoon']), "line 5: genre 'Cartoon' is not one of"),
    (dict(item=None), "not ['ml-100k.item']"),
])
def test_bad_atomic_files_name_file_line_and_fix(tmp_path, kwargs, problem):
  with pytest.raises(DataError, match='ml-100k') as e:
    movielens.load_movielens(write_atomic(tmp_path, **kwargs))
  assert problem in str(e.value)
  assert 'atomic files' in str(e.value)


def test_two_atomic_datasets_in_one_folder_are_refused(tmp_path):
  write_atomic(tmp_path)
  write_atomic(tmp_path, name='ml-1m')
  with pytest.raises(DataError, match='holds 2 atomic rating files'):
    movielens.load_movielens(str(tmp_path))


def test_missing_files_name_both_formats(tmp_path):
  with pytest.raises(DataError, match='u.data.*ml-100k.inter'):
    movielens.load_movielens(str(tmp_path))
