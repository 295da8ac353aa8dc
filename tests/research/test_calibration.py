"""research.movielens_synth.calibration against a plain numpy reference, and the validation
split of the MovieLens task (held-out training users; the test users untouched)."""

import dataclasses

import numpy as np
import pytest

from tests.recommendation import ml100k_files
from tff_meta.core.config_file import ConfigError
from tff_meta.data.movielens import load_movielens
from research.movielens_synth import calibration
from tff_meta.recommendation import config, movielens_task


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
  return ml100k_files.write(tmp_path_factory.mktemp('ml'), num_users=20, num_items=45, seed=3)


def _users(ds):
  """Plain numpy: the seed-0 split into (training users, test users)."""
  ids = sorted(ds.clients, key=int)
  order = np.random.default_rng([0, 6]).permutation(len(ids))
  n_train = int(round(0.8 * len(ids)))
  return [ids[i] for i in sorted(order[:n_train])], [ids[i] for i in sorted(order[n_train:])]


def _query(ds, u):
  """A test user's chronological query set (the last 20%): (items, ratings)."""
  it, r = ds.clients[u].features['item'], ds.clients[u].ratings.astype(float)
  n_s = int(np.floor(0.8 * len(r) + 0.5))
  return it[n_s:], r[n_s:]


def _reference(ds):
  """Plain numpy, chronological query sets: the three baselines of the module doc by hand."""
  train, test = _users(ds)
  items = np.concatenate([ds.clients[u].features['item'] for u in train])
  ratings = np.concatenate([ds.clients[u].ratings for u in train]).astype(float)
  mu = ratings.mean()
  b = {i: (ratings[items == i] - mu).sum() / (25.0 + (items == i).sum()) for i in set(items)}
  mean = {i: ratings[items == i].mean() for i in set(items)}
  err_bias, err_item, p1 = [], [], []
  for u in test:
    it, r = ds.clients[u].features['item'], ds.clients[u].ratings.astype(float)
    n = len(r)
    n_s = int(np.floor(0.8 * n + 0.5))
    s, q = np.arange(n_s), np.arange(n_s, n)
    bs = np.array([b.get(i, 0.0) for i in it[s]])
    bu = (r[s] - mu - bs).sum() / (10.0 + len(s))
    bq = np.array([b.get(i, 0.0) for i in it[q]])
    err_bias.append(np.clip(mu + bq + bu, 1, 5) - r[q])
    err_item.append(np.clip(mu + bq, 1, 5) - r[q])
    score = np.array([mean.get(i, mu) for i in it[q]])
    p1.append(float(r[q][np.argsort(-score, kind='stable')[0]] == 5))
  rmse = lambda e: float(np.sqrt(np.mean(np.concatenate(e) ** 2)))
  return rmse(err_bias), rmse(err_item), float(np.mean(p1))


def test_statistics_match_a_plain_reference(folder):
  ds = load_movielens(folder)
  stats = calibration.statistics(ds)
  bias, item, p1 = _reference(ds)
  assert stats['bias_rmse_chronological'] == pytest.approx(bias, rel=1e-6)
  assert stats['item_rmse_chronological'] == pytest.approx(item, rel=1e-6)
  assert stats['item_p@1_chronological'] == pytest.approx(p1)
  shares = np.bincount(np.concatenate([c.ratings for c in ds.clients.values()]).astype(int),
                       minlength=6)[1:] / ds.num_ratings
  np.testing.assert_allclose([stats[f'stars_{k}'] for k in range(1, 6)], shares)
  assert set(calibration.REAL_ML100K) == set(stats)
  table = calibration.format_statistics(stats)
  assert '| bias_rmse_random |' in table and '0.9318' in table


def test_oracle_statistics_by_hand(folder):
  """The oracle predicts given expected ratings on the test users' query sets; by hand: its
  RMSE, and Precision@1 / @3 of ranking by them (relevant = 5, and >= 4 at 1)."""
  ds = load_movielens(folder)
  expected = {(int(u), int(i)): 1.0 + ((7 * int(u) + 3 * int(i)) % 41) / 10.0
              for u, c in ds.clients.items() for i in c.features['item']}
  stats = calibration.oracle_statistics(ds, expected)
  errors, p1, p3, p4_1 = [], [], [], []
  for u in _users(ds)[1]:
    items, r = _query(ds, u)
    predicted = np.array([expected[int(u), int(i)] for i in items])
    errors.append(predicted - r)
    top = [j for _, j in sorted(zip(-predicted, range(len(r))))]   # ties: query order
    p1.append(float(r[top[0]] == 5))
    p3.append(np.mean([r[j] == 5 for j in top[:min(3, len(r))]]))
    p4_1.append(float(r[top[0]] >= 4))
  assert stats['oracle_rmse_chronological'] == pytest.approx(
      np.sqrt(np.mean(np.concatenate(errors) ** 2)), rel=1e-9)
  assert stats['oracle_p@1_chronological'] == pytest.approx(np.mean(p1))
  assert stats['oracle_p@3_chronological'] == pytest.approx(np.mean(p3))
  assert stats['oracle_p4@1_chronological'] == pytest.approx(np.mean(p4_1))
  assert {k.split('_')[1] for k in stats} == {'rmse', 'p@1', 'p@3', 'p@10', 'p4@1', 'p4@3', 'p4@10'}
  assert stats['oracle_rmse_random'] != stats['oracle_rmse_chronological']
  expected = {(u, i): v for (u, i), v in expected.items() if u != int(_users(ds)[1][0])}
  with pytest.raises(ValueError, match='No expected rating'):
    calibration.oracle_statistics(ds, expected)


def _cfg(folder, **overrides):
  return dataclasses.replace(config.RecommendConfig(), task='movielens', data_path=folder,
                             **overrides).validate()


def test_validation_mode_scores_held_out_training_users_only(folder):
  plain = movielens_task.prepare(_cfg(folder))
  held = movielens_task.prepare(_cfg(folder, validation_fraction=0.25, evaluate_on='validation'))
  kept = movielens_task.prepare(_cfg(folder, validation_fraction=0.25))   # model selection
  train_users = {e.user for e in plain.tasks.train}
  test_users = {e.user for e in plain.tasks.test}
  val_users = {e.user for e in held.tasks.test}
  assert val_users and val_users <= train_users and not val_users & test_users
  assert {e.user for e in held.tasks.train} == train_users - val_users
  assert len(val_users) == round(0.25 * len(train_users))
  assert {e.user for e in held.items.test} == val_users
  assert 'VALIDATION users' in held.summary() and 'VALIDATION' not in plain.summary()
  support = {e.user: len(e.support_y) for e in held.tasks.test}
  totals = {e.user: len(e.support_y) + len(e.query_y) for e in plain.tasks.train}
  assert all(support[u] == int(np.floor(0.8 * totals[u] + 0.5)) for u in val_users)
  # Without evaluate_on = "validation" the same users validate, and the test users are scored.
  assert {e.user for e in kept.tasks.validation} == val_users
  assert {e.user for e in kept.tasks.test} == test_users
  assert {e.user for e in kept.tasks.train} == train_users - val_users
  assert 'VALIDATION' not in kept.summary()
  assert f'{len(val_users)} validation users' in kept.summary()


@pytest.mark.parametrize('key,value', [('validation_fraction', 1.0), ('validation_fraction', -0.1),
                                       ('model', 'mlp')])
def test_bad_validation_fraction_and_model_are_named(folder, key, value):
  with pytest.raises(ConfigError, match=key):
    _cfg(folder, **{key: value})
