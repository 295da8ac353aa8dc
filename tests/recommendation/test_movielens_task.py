"""MovieLens task wiring without TFF runs: the bias baseline against a plain reference, the
support/query sampling key, and the scored metrics."""

import dataclasses
import zlib

import numpy as np
import pytest

from tests.recommendation import ml100k_files
from tff_meta.data.movielens import SPLITS, load_movielens
from tff_meta.program.config import ConfigError
from tff_meta.recommendation import config, movielens_task, tasks
from tff_meta.registry import UnknownNameError


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
  return ml100k_files.write(tmp_path_factory.mktemp('ml'), num_users=25, num_items=50)


def _cfg(folder, **overrides):
  return dataclasses.replace(config.RecommendConfig(), task='movielens', data_path=folder,
                             **overrides).validate()


@pytest.mark.parametrize('sampling', ['chronological', 'random'])
def test_bias_method_matches_a_plain_reference(folder, sampling):
  cfg = _cfg(folder, support_sampling=sampling, bias_item_shrinkage=3.0,
             bias_user_shrinkage=2.0, seed=5)
  row = movielens_task.bias(cfg, movielens_task.prepare(cfg), False).row()
  assert row['method'] == 'Bias baseline'
  # Reference: straight from the loaded users, the seeded user split and the split function.
  ds = load_movielens(folder)
  train_ids, test_ids = tasks.split_users(sorted(ds.clients, key=int), 0.8, 5)
  items = np.concatenate([ds.clients[u].features['item'] for u in train_ids])
  ratings = np.concatenate([ds.clients[u].ratings for u in train_ids]).astype(np.float64)
  mu = ratings.mean()
  b_item = {i: (ratings[items == i] - mu).sum() / (3.0 + np.sum(items == i))
            for i in np.unique(items)}
  errors = []
  for u in test_ids:
    user = ds.clients[u]
    s, q = SPLITS.get(sampling)(len(user), 0.8, 0.2, seed=[5, zlib.crc32(u.encode())])
    item = user.features['item']
    b_s = np.array([b_item.get(i, 0.0) for i in item[s]])
    b_user = (user.ratings[s] - mu - b_s).sum() / (2.0 + len(s))
    pred = np.clip(mu + np.array([b_item.get(i, 0.0) for i in item[q]]) + b_user, 1, 5)
    errors.append(pred - user.ratings[q])
  assert row['rmse'] == pytest.approx(np.sqrt(np.mean(np.concatenate(errors) ** 2)), rel=1e-5)


def test_sampling_changes_the_query_sets(folder):
  chrono = movielens_task.prepare(_cfg(folder))
  rand = movielens_task.prepare(_cfg(folder, support_sampling='random'))
  assert [e.user for e in chrono.tasks.test] == [e.user for e in rand.tasks.test]
  assert any(not np.array_equal(c.query_y, r.query_y) or not np.array_equal(c.query_x, r.query_x)
             for c, r in zip(chrono.tasks.test, rand.tasks.test))


def test_bad_sampling_and_shrinkage_are_named(folder):
  with pytest.raises(UnknownNameError, match='chronological'):
    _cfg(folder, support_sampling='latest')
  with pytest.raises(ConfigError, match='bias_user_shrinkage'):
    _cfg(folder, bias_user_shrinkage=-1.0)
  assert config.RecommendConfig().support_sampling == 'chronological'
