"""MovieLens task wiring without TFF runs: the bias baseline against a plain reference, the
support/query sampling key, and the scored metrics."""

import dataclasses
import zlib

import numpy as np
import pytest

from tests.recommendation import ml100k_files
from tff_meta.core.config_file import ConfigError
from tff_meta.data.movielens import SPLITS, load_movielens
from tff_meta.learning import step_scale
from tff_meta.recommendation import config, methods, movielens_task, tasks
from tff_meta.core.registry import UnknownNameError


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
  chrono = movielens_task.prepare(_cfg(folder, support_sampling='chronological'))
  rand = movielens_task.prepare(_cfg(folder, support_sampling='random'))
  assert [e.user for e in chrono.tasks.test] == [e.user for e in rand.tasks.test]
  assert any(not np.array_equal(c.query_y, r.query_y) or not np.array_equal(c.query_x, r.query_x)
             for c, r in zip(chrono.tasks.test, rand.tasks.test))


def test_bad_sampling_and_shrinkage_are_named(folder):
  with pytest.raises(UnknownNameError, match='chronological'):
    _cfg(folder, support_sampling='latest')
  with pytest.raises(ConfigError, match='bias_user_shrinkage'):
    _cfg(folder, bias_user_shrinkage=-1.0)
  assert config.RecommendConfig().support_sampling == 'random'


def test_score_reports_the_papers_precision_and_the_extras():
  episodes = [tasks.Episode('1', None, None, None, np.array([5.0, 3.0, 4.0])),
              tasks.Episode('2', None, None, None, np.array([4.0, 5.0]))]
  preds = [np.array([3.0, 1.0, 2.0]), np.array([2.0, 1.0])]
  s = movielens_task.score(preds, episodes)
  assert s['rmse'] == pytest.approx(np.sqrt((4 + 4 + 4 + 4 + 16) / 5))
  # Top-1 items: rating 5 and rating 4 -> P@1 (rating 5) 1/2, (rating >= 4) 1.
  assert s['precision@1'] == 0.5 and s['precision_ge4@1'] == 1.0
  assert s['precision@3'] == pytest.approx((1 / 3 + 1 / 2) / 2)
  assert s['ndcg@1'] == pytest.approx((1 + 15 / 31) / 2)
  assert set(s) == set(movielens_task.METRICS + movielens_task.EXTRA_METRICS)


def test_table_names_the_methods_that_lose_to_the_bias_baseline():
  def row(method, rmse):
    return {'method': method, 'rmse': rmse, **{m: 0.5 for m in movielens_task.METRICS[1:]},
            **{m: 0.25 for m in movielens_task.EXTRA_METRICS}}
  table = movielens_task.format_table([('80% Support', [
      row('Bias baseline', 0.95), row('NN(pre-trained)', 1.0), row('MAML', 0.93),
      row('Meta-SGD', 0.95)])])
  assert '| 80% Support | Bias baseline | 0.9500 | 50.00% | 50.00% | 50.00% |' in table
  assert ('80% Support: RMSE not below the Bias baseline (0.9500): NN(pre-trained), Meta-SGD'
          in table)
  assert '| setting | method | P@1 (rating >= 4) |' in table
  assert '| 80% Support | MAML | 25.00% | 25.00% | 25.00% | 0.2500 | 0.2500 | 0.2500 |' in table
  table = movielens_task.format_table([('80% Support', [row('Bias baseline', 0.95),
                                                        row('MAML', 0.93)])])
  assert "80% Support: every other method's RMSE is below the Bias baseline (0.9500)" in table
  table = movielens_task.format_table([('80% Support', [
      row('NN(pre-trained)', 1.0), row('MAML', 0.93), row('MAML(pre-trained start)', 0.9)])])
  assert '| 80% Support | Improvement (MAML vs NN(pre-trained)) | 7.00% | 0.00% |' in table
  assert ('| 80% Support | Improvement (MAML(pre-trained start) vs NN(pre-trained)) | 10.00% |'
          in table)


def test_bias_start_takes_the_training_users_item_biases(folder):
  """rating_init = bias: the wide path's weight of movie m is logit((mu + b_m) / 5) - logit(mu / 5)
  with mu and b_m from the training users only (a plain reference); NN(self)'s model keeps the
  Keras start."""
  cfg = _cfg(folder, model='rating_wide_mlp', rating_init='bias', bias_item_shrinkage=3.0, seed=5)
  data = movielens_task.prepare(cfg)
  w = movielens_task._model(cfg, data).initial_trainable
  ds = load_movielens(folder)
  train_ids, _ = tasks.split_users(sorted(ds.clients, key=int), 0.8, 5)
  items = np.concatenate([ds.clients[u].features['item'] for u in train_ids])
  ratings = np.concatenate([ds.clients[u].ratings for u in train_ids]).astype(np.float64)
  mu = ratings.mean()
  logit = lambda r: np.log(r / (5.0 - r))
  expected = np.zeros(data.dataset.max_item_id)
  for i in np.unique(items):
    b = (ratings[items == i] - mu).sum() / (3.0 + np.sum(items == i))
    expected[i - 1] = logit(np.clip(mu + b, 1.0, 4.9)) - logit(mu)
  np.testing.assert_allclose(w[3][:data.dataset.max_item_id, 0], expected, atol=1e-5)
  np.testing.assert_array_equal(w[3][data.dataset.max_item_id:], 0.0)   # other features: zero
  np.testing.assert_allclose(w[4], [logit(mu)], rtol=1e-6)
  keras = movielens_task._model(cfg, data, start='keras').initial_trainable
  np.testing.assert_array_equal(keras[3], 0.0)
  np.testing.assert_array_equal(keras[4], 0.0)
  np.testing.assert_array_equal(keras[0], w[0])                        # same deep path


def test_a_meta_batch_is_clients_per_episode_distinct_training_users(folder, monkeypatch):
  """MAML's episode e sends `clients_per_episode` distinct training users, drawn by (seed, e), to
  one FedMeta round (whose server averages their meta-gradients: test_rating_meta)."""
  seen = {}

  def fake(cfg, *, train_batch, **kwargs):
    seen.update({e: train_batch(e) for e in (1, 2)})
    return methods.MethodResult(kwargs['display'], {})

  monkeypatch.setattr(methods, 'meta_learning', fake)
  cfg = _cfg(folder, clients_per_episode=4, seed=3)
  data = movielens_task.prepare(cfg)
  movielens_task.METHODS.get('maml')(cfg, data, False)
  train = {e.user: e for e in data.tasks.train}
  for episode, batch in seen.items():
    users = [next(u for u, e in train.items() if np.array_equal(e.query_y, b['query_y'])
                  and np.array_equal(e.support_x, b['support_x'])) for b in batch]
    assert len(set(users)) == 4
    order = np.random.default_rng([3, episode]).choice(len(train), 4, replace=False)
    assert users == [data.tasks.train[i].user for i in order]
  assert [b['query_y'].tolist() for b in seen[1]] != [b['query_y'].tolist() for b in seen[2]]


def _rows(x, y):
  """A split's rows as a sorted list, to compare sets of (features, rating) rows."""
  return sorted(map(tuple, np.column_stack([x, y]).tolist()))


def test_per_episode_split_redraws_each_visit_from_the_same_ratings(folder, monkeypatch):
  """train_split = "per_episode": a training user's ratings are split anew at each visit,
  seeded by (seed, user, episode), with the fixed split's sizes and none of its rows lost or
  repeated; "fixed" sends the user's one split every time."""
  seen = {}

  def fake(cfg, *, train_batch, **kwargs):
    seen[cfg.train_split] = {e: train_batch(e) for e in range(1, 40)}
    return methods.MethodResult(kwargs['display'], {})

  monkeypatch.setattr(methods, 'meta_learning', fake)
  for split in ('fixed', 'per_episode'):
    cfg = _cfg(folder, train_split=split, train_support_fraction=0.4, seed=2)
    data = movielens_task.prepare(cfg)
    movielens_task.METHODS.get('maml')(cfg, data, False)
  train = data.tasks.train
  visits = {}
  for episode, (fixed, drawn) in enumerate(zip(seen['fixed'].values(),
                                               seen['per_episode'].values()), 1):
    user = train[methods.sample_user(len(train), cfg, episode)]
    (f,), (d,) = fixed, drawn
    assert np.array_equal(f['query_y'], user.query_y)
    assert np.array_equal(f['support_x'], user.support_x)
    assert (len(d['support_y']), len(d['query_y'])) == (len(user.support_y), len(user.query_y))
    assert (_rows(np.concatenate([d['support_x'], d['query_x']]),
                  np.concatenate([d['support_y'], d['query_y']]))
            == _rows(user.all_x, user.all_y))
    s, q = SPLITS.get('random')(len(user.all_y), 0.4, 0.6,
                                seed=[2, zlib.crc32(user.user.encode()), episode])
    assert np.array_equal(d['query_x'], user.all_x[q])
    assert np.array_equal(d['support_y'], user.all_y[s])
    visits.setdefault(user.user, []).append(_rows(d['query_x'], d['query_y']))
  again = [v for v in visits.values() if len(v) > 1]
  assert again and all(v[0] != v[1] for v in again)


def test_per_episode_chronological_split_is_the_fixed_one_and_bad_names_fail(folder, monkeypatch):
  """Time fixes a chronological split, so "per_episode" sends each user's own split."""
  seen = []
  monkeypatch.setattr(methods, 'meta_learning', lambda cfg, *, train_batch, **kw: seen.append(
      [train_batch(e) for e in range(1, 20)]))
  for split in ('fixed', 'per_episode'):
    cfg = _cfg(folder, train_split=split, support_sampling='chronological')
    movielens_task.METHODS.get('maml')(cfg, movielens_task.prepare(cfg), False)
  for fixed, drawn in zip(*seen):
    for key in ('support_x', 'support_y', 'query_x', 'query_y'):
      assert np.array_equal(fixed[0][key], drawn[0][key])
  with pytest.raises(ConfigError, match='train_split must be one of fixed, per_episode'):
    _cfg(folder, train_split='always')


@pytest.mark.slow
def test_factor_lr_scale_reaches_the_factor_layer_of_maml_and_nn_pretrained(folder, monkeypatch):
  """factor_lr_scale multiplies the outer step of rating_factor_mlp's E and u only, for MAML
  (server optimizer) and NN(pre-trained) (pre-training optimizer) alike; a bad value is named."""
  cfg = _cfg(folder, model='rating_factor_mlp', rating_init='bias', factors=3,
             factor_lr_scale=7.0, seed=2)
  data = movielens_task.prepare(cfg)
  model = movielens_task._model(cfg, data)
  scales = movielens_task._step_scales(cfg, model)
  shapes = [w.shape for w, c in zip(model.initial_trainable, scales) if c != 1.0]
  assert sorted(shapes) == sorted([(data.dataset.max_item_id, 3), (3,)])   # E and u
  assert set(scales) == {1.0, 7.0}
  seen = {}
  monkeypatch.setattr(methods, 'meta_learning',
                      lambda cfg, **kw: seen.setdefault('maml', kw['step_scales']))
  monkeypatch.setattr(methods, 'pretraining',
                      lambda cfg, **kw: seen.setdefault('nn', kw['trainer'].optimizer))
  movielens_task.METHODS.get('maml')(cfg, data, False)
  movielens_task.METHODS.get('nn_pretrained')(cfg, data, False)
  assert seen['maml'] == scales
  assert isinstance(seen['nn'], step_scale.ScaledSteps)
  with pytest.raises(ConfigError, match='factor_lr_scale must be > 0'):
    _cfg(folder, model='rating_factor_mlp', factor_lr_scale=0.0)
  with pytest.raises(ConfigError, match='factor layer of model = "rating_factor_mlp"'):
    _cfg(folder, model='rating_wide_mlp', factor_lr_scale=2.0)


def test_bias_scores_the_validation_users_for_the_curves_line(folder):
  """Under model selection Fig. 2's curves score the validation users, so the bias baseline's
  line (curve_reference) is its score there: what evaluate_on = validation scores as its row."""
  common = dict(validation_fraction=0.2, select_on='validation_rmse', seed=3)
  cfg = _cfg(folder, **common)
  result = movielens_task.bias(cfg, movielens_task.prepare(cfg), False)
  on_validation = _cfg(folder, evaluate_on='validation', **common)
  expected = movielens_task.bias(on_validation, movielens_task.prepare(on_validation), False)
  assert result.curve_reference == pytest.approx(expected.metrics)
  assert result.curve_reference['rmse'] != pytest.approx(result.metrics['rmse'])   # other users
  assert 'curve_reference' not in result.row()
  no_selection = _cfg(folder, **{**common, 'select_on': 'last'})
  assert movielens_task.bias(no_selection, movielens_task.prepare(no_selection),
                             False).curve_reference is None
