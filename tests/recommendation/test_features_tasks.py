"""MovieLens encoder, user split and chronological episodes."""

import numpy as np
import pytest

from tff_meta.data.movielens import load_movielens
from tff_meta.data.types import DataError
from tff_meta.recommendation import features, tasks
from tests.recommendation import ml100k_files


@pytest.fixture(scope='module')
def ml(tmp_path_factory):
  return load_movielens(ml100k_files.write(tmp_path_factory.mktemp('ml'), num_users=12))


def test_encoder_is_deterministic_and_exact(ml):
  enc = features.MovieLensEncoder.for_dataset(ml)
  assert enc.dim == ml.max_item_id + 19 + 2 + 7 + ml.num_occupations + 7 + 24 + 1
  user = ml.clients['1']
  x = enc.encode(user)
  np.testing.assert_array_equal(x, features.MovieLensEncoder.for_dataset(ml).encode(user))
  assert x.shape == (len(user), enc.dim) and x.dtype == np.float32
  # Row 0 by hand: one-hot item, the genres, one-hot gender/age group/occupation/weekday/hour.
  f, row = user.features, x[0]
  assert row[f['item'][0] - 1] == 1 and row[:ml.max_item_id].sum() == 1
  o = ml.max_item_id
  np.testing.assert_array_equal(row[o:o + 19], f['genres'][0])
  o += 19
  assert row[o + f['gender'][0]] == 1 and row[o:o + 2].sum() == 1
  o += 2
  group = int(np.searchsorted(features.AGE_BOUNDS, f['age'][0], side='right'))
  assert row[o + group] == 1 and row[o:o + 7].sum() == 1
  o += 7 + ml.num_occupations
  ts = int(f['timestamp'][0])
  import datetime
  when = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)
  assert row[o + when.weekday()] == 1 and row[o + 7 + when.hour] == 1
  assert row[-1] == pytest.approx((ts - features.TIME_ORIGIN) / features.SECONDS_PER_YEAR)


def test_age_groups():
  assert list(np.searchsorted(features.AGE_BOUNDS, [7, 17, 18, 24, 25, 49, 50, 56, 73],
                              side='right')) == [0, 0, 1, 1, 2, 4, 5, 6, 6]


def test_user_split_and_chronological_episodes(ml):
  enc = features.MovieLensEncoder.for_dataset(ml)
  users = tasks.encode_users(ml.clients, enc.encode)
  t = tasks.rating_tasks(users, support_fraction=0.2, train_support_fraction=0.6, seed=3)
  assert len(t.train) + len(t.test) == 12 and len(t.test) == 2
  assert not {e.user for e in t.train} & {e.user for e in t.test}
  again = tasks.rating_tasks(users, support_fraction=0.2, train_support_fraction=0.6, seed=3)
  assert [e.user for e in again.test] == [e.user for e in t.test]
  time_col = enc.dim - 1
  for e, p in [(e, 0.6) for e in t.train] + [(e, 0.2) for e in t.test]:
    n = len(e.support_y) + len(e.query_y)
    assert n == len(ml.clients[e.user])           # every rating is used
    assert abs(len(e.support_y) - p * n) <= 1
    # No support rating is later than a query rating.
    assert e.support_x[:, time_col].max() <= e.query_x[:, time_col].min()


def test_random_episodes_use_the_same_users_and_sizes(ml):
  enc = features.MovieLensEncoder.for_dataset(ml)
  users = tasks.encode_users(ml.clients, enc.encode)
  split = dict(support_fraction=0.8, train_support_fraction=0.5, seed=3)
  chrono = tasks.rating_tasks(users, **split)
  rand = tasks.rating_tasks(users, **split, sampling='random')
  assert tasks.rating_tasks(users, **split, sampling='random').test[0].query_y.tolist() == \
      rand.test[0].query_y.tolist()
  time_col = enc.dim - 1
  later_support = 0
  for c, r in zip(chrono.train + chrono.test, rand.train + rand.test):
    assert c.user == r.user
    assert (len(c.support_y), len(c.query_y)) == (len(r.support_y), len(r.query_y))
    # The same ratings, split differently: every rating is used once.
    np.testing.assert_array_equal(np.sort(c.all_x[:, time_col]), np.sort(r.all_x[:, time_col]))
    assert np.all(np.diff(r.query_x[:, time_col]) >= 0)         # each set in time order
    later_support += r.support_x[:, time_col].max() > r.query_x[:, time_col].min()
  assert later_support > len(rand.train) // 2                    # not the latest ratings
  with pytest.raises(Exception, match='chronological'):
    tasks.rating_tasks(users, **split, sampling='by_rating')


def test_split_needs_two_users():
  with pytest.raises(DataError, match='at least one training and one testing user'):
    tasks.split_users(['1'], 0.8, 0)
