"""precision_ceiling: rankings scored against hand computation; the benchmark program's ends."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from research.movielens_synth import synth as movielens_synth
from tff_meta.data.movielens import GENRES, RatingsDataset, UserRatings
from research import precision_ceiling as pc
from tff_meta.recommendation.tasks import Episode, RatingTasks
from tests.recommendation import ml100k_files

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _user(items, ratings, flags, gender=0):
  n = len(items)
  features = {'item': np.array(items, np.int32),
              'genres': np.stack([flags[i] for i in items]).astype(np.float32),
              'gender': np.full(n, gender, np.int32), 'age': np.full(n, 30, np.int32),
              'occupation': np.zeros(n, np.int32), 'timestamp': np.arange(n, dtype=np.int64)}
  return UserRatings(features, np.array(ratings, np.float32))


def _episode(user, support, query):
  col = lambda pairs: np.array([[i] for i, _ in pairs], np.int64).reshape(-1, 1)
  val = lambda pairs: np.array([r for _, r in pairs], np.float64)
  return Episode(user, col(support), val(support), col(query), val(query))


def _setup(users, episodes):
  """A context of hand-built users ({id: [(item, rating)]}) and episodes (train, test)."""
  items = sorted({i for rows in users.values() for i, _ in rows})
  flags = {i: np.eye(len(GENRES))[1 + i % 2] for i in items}    # odd items: one genre
  ds = RatingsDataset('hand', {u: _user([i for i, _ in rows], [r for _, r in rows], flags, k % 2)
                               for k, (u, rows) in enumerate(users.items())},
                      num_users=len(users), num_items=len(items), max_item_id=max(items),
                      occupations=('other',))
  train, test = episodes
  return pc.context(ds, RatingTasks(train=train, test=test, feature_dim=1)), test


def test_item_mean_precision_and_rmse_by_hand():
  a = [(1, 5), (2, 3), (3, 4)]
  b = [(1, 3), (2, 1), (3, 4)]
  t1 = [(5, 3), (2, 5), (3, 4), (4, 5)]
  t2 = [(5, 3), (1, 5), (3, 1)]
  ctx, test = _setup({'a': a, 'b': b, 't1': t1, 't2': t2},
                     ([_episode('a', a[:1], a[1:]), _episode('b', b[:1], b[1:])],
                      [_episode('t1', t1[:1], t1[1:]), _episode('t2', t2[:1], t2[1:])]))
  # Training means: item 1 -> 4, 2 -> 2, 3 -> 4; mu = 20 / 6 for item 4 (no training rating).
  assert ctx.mu == pytest.approx(20 / 6)
  got = pc.scores(ctx, test, pc.item_mean)
  # t1 ranks item 3 (4.0) over 4 (3.33) over 2 (2.0): top rating 4; top 3: 4, 5, 5.
  # t2 ties items 1 and 3 at 4.0: the first in query order (item 1, rating 5) ranks first.
  assert got['p@1'] == pytest.approx((0 + 1) / 2)
  assert got['p@3'] == pytest.approx((2 / 3 + 1 / 2) / 2)
  assert got['p@10'] == pytest.approx((2 / 3 + 1 / 2) / 2)
  squares = [(2 - 5) ** 2, 0, (20 / 6 - 5) ** 2, (4 - 5) ** 2, (4 - 1) ** 2]
  assert got['rmse'] == pytest.approx(math.sqrt(sum(squares) / 5))


def test_ridge_fits_a_line_and_shrinks_to_the_mean():
  x = np.array([[0.0], [1.0], [2.0], [3.0]])
  c, w = pc.ridge(x, 1.0 + 2.0 * x[:, 0], 0.0)
  assert c == pytest.approx(1.0) and w == pytest.approx([2.0])
  c, w = pc.ridge(x, 1.0 + 2.0 * x[:, 0], 1e9)        # the intercept is not penalised
  assert w[0] == pytest.approx(0.0, abs=1e-6) and c == pytest.approx(4.0)
  # penalty 5 on centred x (sum of squares 5): w = 2 * 5 / (5 + 5) = 1.
  c, w = pc.ridge(x, 1.0 + 2.0 * x[:, 0], 5.0)
  assert w == pytest.approx([1.0]) and c == pytest.approx(4.0 - 1.5)


def _taste_users(num_users=20, num_items=10):
  """Half the users rate the odd items 5 and the even 1, half the reverse: every item's mean
  is 3, so item means cannot rank, and one factor explains every rating."""
  users = {}
  for u in range(num_users):
    sign = 1 if u % 2 else -1
    users[str(u)] = [(i, 3 + 2 * sign * (1 if i % 2 else -1)) for i in range(1, num_items + 1)]
  return users


def test_a_taste_the_item_ids_carry_is_found_by_als_not_by_item_means():
  users = _taste_users()
  train = [_episode(u, rows[:5], rows[5:]) for u, rows in users.items() if int(u) < 16]
  test = [_episode(u, rows[:6], rows[6:]) for u, rows in users.items() if int(u) >= 16]
  ctx, test = _setup(users, (train, test))
  floor = pc.scores(ctx, test, pc.item_mean)
  # Every item mean is 3 (ties): the query order ranks item 7 first; rated 5 by the odd users.
  assert floor['p@1'] == pytest.approx(0.5)
  als = pc.scores(ctx, test, pc.rankers([1.0], factors=1)['als_ridge_1'])
  assert als['p@1'] == 1.0 and als['p@3'] == pytest.approx(2 / 3)   # 2 of the 4 query items are 5
  assert als['rmse'] < 0.5


def test_an_item_only_a_test_user_rated_has_zero_factors_not_an_error():
  users = _taste_users()
  users['19'].append((11, 4))          # the catalogue's largest id, rated by one test user
  train = [_episode(u, rows[:5], rows[5:]) for u, rows in users.items() if int(u) < 16]
  test = [_episode(u, rows[:6], rows[6:]) for u, rows in users.items() if int(u) >= 16]
  ctx, test = _setup(users, (train, test))
  q = pc.als_item_factors(ctx, factors=1)
  assert q.shape == (12, 1) and q[11, 0] == 0.0 and q[0, 0] == 0.0 and np.all(q[1:11] != 0)
  assert pc.scores(ctx, test, pc.rankers([1.0], factors=1)['als_ridge_1'])['p@1'] == 1.0


def test_genre_ridge_uses_the_support_taste_and_demo_genre_a_shared_one():
  users = _taste_users()          # odd and even items differ in genre: it carries the taste
  train = [_episode(u, rows[:5], rows[5:]) for u, rows in users.items() if int(u) < 16]
  test = [_episode(u, rows[:6], rows[6:]) for u, rows in users.items() if int(u) >= 16]
  ctx, test = _setup(users, (train, test))
  assert pc.scores(ctx, test, pc.genre_ridge(0.1))['p@1'] == 1.0
  # Gender = user index parity = the taste's sign, so the demographic model learns it as well.
  assert pc.scores(ctx, test, pc.demo_genre)['p@1'] == 1.0


@pytest.mark.slow
def test_latent_factors_are_the_generators():
  z = movielens_synth.latent_factors(3)
  files = movielens_synth.generate(3)
  flags = np.array([[int(v) for v in line.split('|')[-19:]]
                    for line in files['u.item'].splitlines()])
  assert np.array_equal(z['flags'], flags)
  assert z['p'].shape == (movielens_synth.NUM_USERS, movielens_synth.FACTORS)
  # The genre part of q is a function of the flags alone.
  same = np.flatnonzero((flags == flags[0]).all(axis=1))
  assert np.allclose(z['q_genre'][same], z['q_genre'][same[0]])
  own = z['q'] - z['q_genre']
  assert 0.15 < own.std() < 0.25                 # item_factor_sd 0.205


def test_interaction_spread_by_hand():
  z = {'b_item': np.array([0.0, 2.0]), 'p': np.array([[1.0]]), 'q': np.array([[1.0], [3.0]]),
       'q_genre': np.array([[0.0], [1.0]])}
  out = pc.interaction_spread(z, np.array([0, 0]), np.array([0, 1]))
  assert out == pytest.approx({'b_i': 1.0, 'p.q_genre': 0.5, 'p.q_own': 0.5})


def _program(*args):
  return subprocess.run([sys.executable, '-m', 'research.precision_ceiling_benchmark', *args],
                        cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_program_scores_a_folder_and_refuses_a_missing_one(tmp_path):
  folder = ml100k_files.write(tmp_path / 'ml', num_users=40)
  out = _program(f'--data_path={folder}', '--penalties=3,10', '--factors=2')
  assert out.returncode == 0, out.stderr
  assert '| item_mean |' in out.stdout and '| als_ridge_10 |' in out.stdout
  assert 'oracle' not in out.stdout                        # not a generated folder
  missing = _program(f'--data_path={tmp_path / "none"}')
  assert missing.returncode == 1
  assert missing.stderr.startswith('error: --data_path=') and len(missing.stderr.splitlines()) == 1
  bad = _program(f'--data_path={folder}', '--penalties=x')
  assert bad.returncode == 1 and bad.stderr.startswith('error: --penalties=x')
