"""The bias-baseline start of the rating models, against hand-computed predictions."""

import numpy as np
import pytest

from tff_meta.learning import losses
from tff_meta.models import build_model_spec
from tff_meta.recommendation import config as config_lib
from tff_meta.recommendation import factors, warm_start
from tff_meta.recommendation.training import Trainer

ITEMS = 4


def _predict(spec, weights, x):
  return np.ravel(Trainer(spec, losses.SQUARED_ERROR, 'sgd', 0.1).predict(weights, x))


def test_logit_rating_inverts_the_scaled_sigmoid():
  r = np.array([1.0, 2.5, 3.5, 4.9])
  np.testing.assert_allclose(5.0 / (1.0 + np.exp(-warm_start.logit_rating(r))), r, rtol=1e-12)
  assert warm_start.logit_rating(2.5) == 0.0


def test_bias_start_of_the_wide_model_predicts_the_item_means():
  """Items [1, 1, 2], ratings [5, 4, 2], no shrinkage: mu = 11/3, b_1 = 4.5 - mu, b_2 = 2 - mu;
  with the deep path silent the model predicts 4.5 for item 1, 2 for item 2 and mu for the
  items nobody rated (3, 4)."""
  spec = build_model_spec('rating_wide_mlp', (ITEMS,), 1, seed=1, hidden_units=3)
  started = warm_start.initialized(spec, 'bias', np.array([1, 1, 2]), np.array([5.0, 4.0, 2.0]),
                                   item_shrinkage=0.0)
  w = [np.array(v) for v in started.initial_trainable]
  for i in (0, 1, 2):          # the deep path keeps its Keras start
    np.testing.assert_array_equal(w[i], spec.initial_trainable[i])
  np.testing.assert_allclose(w[4], [np.log((11 / 15) / (4 / 15))], rtol=1e-6)
  w[2][:] = 0.0
  x = np.eye(ITEMS, dtype=np.float32)
  np.testing.assert_allclose(_predict(started, w, x), [4.5, 2.0, 11 / 3, 11 / 3], rtol=1e-5)


def test_bias_start_clips_ratings_at_the_edge_and_shrinks():
  """Item 1 rated 5 twice: shrinkage 2 gives b_1 = 2 (5 - mu) / 4 with mu = 4 (items [1, 1, 2],
  ratings [5, 5, 2]): 4.5; shrinkage 0 would give 5, clipped to 4.9."""
  spec = build_model_spec('rating_wide_mlp', (ITEMS,), 1, seed=1, hidden_units=3)
  x = np.eye(ITEMS, dtype=np.float32)[:1]
  for shrinkage, expected in ((2.0, 4.5), (0.0, 4.9)):
    w = warm_start.initialized(spec, 'bias', np.array([1, 1, 2]), np.array([5.0, 5.0, 2.0]),
                               shrinkage).initial_trainable
    w[2][:] = 0.0
    np.testing.assert_allclose(_predict(spec, w, x), [expected], rtol=1e-5)


def test_bias_start_of_the_papers_network_sets_only_its_output_bias():
  """rating_mlp has no per-movie weight of its own: an all-zero input reaches only the output
  bias (relu(0 + 0) = 0), so the model predicts mu = 3."""
  spec = build_model_spec('rating_mlp', (ITEMS,), 1, seed=1, hidden_units=3)
  w = warm_start.initialized(spec, 'bias', np.array([1, 2]), np.array([4.0, 2.0]),
                             0.0).initial_trainable
  for i in (0, 1, 2):
    np.testing.assert_array_equal(w[i], spec.initial_trainable[i])
  np.testing.assert_allclose(_predict(spec, w, np.zeros((2, ITEMS), np.float32)), [3.0, 3.0],
                             rtol=1e-5)


def test_keras_start_is_unchanged_and_names_match_the_config():
  spec = build_model_spec('rating_wide_mlp', (ITEMS,), 1, seed=1, hidden_units=3)
  w = warm_start.initialized(spec, 'keras', np.array([1]), np.array([4.0]), 25.0).initial_trainable
  for a, b in zip(w, spec.initial_trainable):
    np.testing.assert_array_equal(a, b)
  assert sorted(warm_start.RATING_INITS.names()) == sorted(config_lib.RATING_INITS)
  with pytest.raises(config_lib.ConfigError, match='rating_init'):
    config_lib.RecommendConfig(rating_init='zero').validate()


def test_a_movie_id_outside_the_inputs_is_refused():
  spec = build_model_spec('rating_wide_mlp', (ITEMS,), 1, seed=1, hidden_units=3)
  with pytest.raises(ValueError, match='Movie ids'):
    warm_start.bias_weights(spec, 3.0, {ITEMS + 1: 0.5})


def test_bias_start_of_the_factor_model_predicts_the_item_means():
  """rating_factor_mlp keeps rating_wide_mlp's wide path and output bias (the last weight), so
  the bias start sets them as for the wide model (items [1, 1, 2], ratings [5, 4, 2]: 4.5, 2,
  mu = 11/3) and leaves the deep path, E and u (at zero) as built."""
  spec = build_model_spec('rating_factor_mlp', (ITEMS + 2,), 1, seed=1, hidden_units=3,
                          movies=ITEMS, factors=2)
  started = warm_start.initialized(spec, 'bias', np.array([1, 1, 2]), np.array([5.0, 4.0, 2.0]),
                                   item_shrinkage=0.0)
  w = [np.array(v) for v in started.initial_trainable]
  for i in range(5):          # W, c, v, E, u keep their start
    np.testing.assert_array_equal(w[i], spec.initial_trainable[i])
  np.testing.assert_array_equal(w[4], 0.0)
  np.testing.assert_array_equal(w[5][ITEMS:], 0.0)   # the non-movie inputs' wide weights
  w[2][:] = 0.0
  x = np.eye(ITEMS + 2, dtype=np.float32)[:ITEMS]
  np.testing.assert_allclose(_predict(started, w, x), [4.5, 2.0, 11 / 3, 11 / 3], rtol=1e-5)


def _factor_spec():
  return build_model_spec('rating_factor_mlp', (ITEMS,), 1, seed=1, hidden_units=3,
                          movies=ITEMS, factors=2)


def test_factors_start_sets_the_embedding_to_als_item_factors_in_score_units():
  """E's row of movie m is q_m / (mu (5 - mu) / 5), q = `factors.als_item_factors` of the
  centred residuals of each training user; u stays 0, so the untrained model still predicts
  the bias start's mu + b_i (deep path silenced); movie 4, rated by nobody, gets a zero row."""
  users = np.array([0, 0, 0, 1, 1, 2, 2, 2])
  items = np.array([1, 2, 3, 1, 2, 1, 2, 3])
  ratings = np.array([5.0, 2.0, 4.0, 4.0, 1.0, 2.0, 5.0, 3.0])
  spec = _factor_spec()
  started = warm_start.initialized(spec, 'factors', items, ratings, 0.0, users).initial_trainable
  mu, b_item = 26.0 / 8, {1: 11 / 3 - 26 / 8, 2: 8 / 3 - 26 / 8, 3: 3.5 - 26 / 8}
  u_idx, ids, res = factors.centred_residuals(
      [items[users == u] for u in range(3)], [ratings[users == u] for u in range(3)], mu, b_item)
  q = factors.als_item_factors(u_idx, ids, res, 2)
  np.testing.assert_allclose(started[3][:3], q[1:4] / (mu * (5 - mu) / 5), rtol=1e-6)
  np.testing.assert_array_equal(started[3][3], 0.0)
  np.testing.assert_array_equal(started[4], 0.0)
  bias = warm_start.initialized(spec, 'bias', items, ratings, 0.0).initial_trainable
  for i in (0, 1, 2, 5, 6):
    np.testing.assert_allclose(started[i], bias[i], rtol=1e-6)
  started[2][:] = 0.0
  np.testing.assert_allclose(_predict(spec, started, np.eye(ITEMS, dtype=np.float32)),
                             [11 / 3, 8 / 3, 3.5, mu], rtol=1e-5)


def test_factors_start_needs_the_factor_model_and_the_users():
  wide = build_model_spec('rating_wide_mlp', (ITEMS,), 1, seed=1, hidden_units=3)
  with pytest.raises(ValueError, match='rating_factor_mlp'):
    warm_start.initialized(wide, 'factors', np.array([1, 2]), np.array([4.0, 2.0]), 0.0,
                           np.array([0, 0]))
  with pytest.raises(ValueError, match='user'):
    warm_start.initialized(_factor_spec(), 'factors', np.array([1, 2]), np.array([4.0, 2.0]), 0.0)
  with pytest.raises(config_lib.ConfigError, match='rating_factor_mlp'):
    config_lib.RecommendConfig(rating_init='factors', model='rating_wide_mlp').validate()
  with pytest.raises(config_lib.ConfigError, match='factor_scale'):
    config_lib.RecommendConfig(factor_scale=0.0).validate()
