"""`rating_factor_mlp`: `rating_wide_mlp` plus <E x_movie, u>, against hand computations."""

import numpy as np
import pytest

from tff_meta.learning import losses
from tff_meta.models import build_model_spec
from tff_meta.recommendation.training import Trainer

DIM, MOVIES, FACTORS, HIDDEN = 7, 3, 2, 4
# Weight order (Keras): W, c, v (rating_wide_mlp's deep path), E^T, u (the factor term),
# w, b (the wide path; b, the output bias, last as in rating_wide_mlp).
EMB, USER = 3, 4


def _spec(name='rating_factor_mlp', **options):
  if name == 'rating_factor_mlp':
    options = {'movies': MOVIES, 'factors': FACTORS, **options}
  return build_model_spec(name, (DIM,), 1, seed=3, hidden_units=HIDDEN, **options)


def _predict(spec, weights, x):
  return np.ravel(Trainer(spec, losses.SQUARED_ERROR, 'sgd', 0.1).predict(weights, x))


def _inputs():
  """Rows: movie 2, movie 0, movie 1, each with other (non-movie) features switched on."""
  x = np.zeros((3, DIM), np.float32)
  x[[0, 1, 2], [2, 0, 1]] = 1.0
  x[:, 3:] = [[1.0, 0.0, 0.5, -1.0], [0.0, 1.0, 2.0, 0.0], [1.0, 1.0, -0.5, 0.3]]
  return x


def _shared(spec):
  """Weights off zero for the deep and wide paths (shared with rating_wide_mlp)."""
  rng = np.random.default_rng(7)
  w = [np.array(v) for v in spec.initial_trainable]
  w[-2] = rng.normal(0, 0.3, (DIM, 1)).astype(np.float32)
  w[-1] = np.array([0.2], np.float32)
  return w


def _numpy_wide(w, x):
  w1, b1, v, w_wide, b_wide = w
  return np.maximum(x @ w1 + b1, 0.0) @ v + x @ w_wide + b_wide   # the pre-sigmoid score


def test_layout_and_starts():
  spec = _spec()
  shapes = [w.shape for w in spec.initial_trainable]
  assert shapes == [(DIM, HIDDEN), (HIDDEN,), (HIDDEN, 1), (MOVIES, FACTORS), (FACTORS,),
                    (DIM, 1), (1,)]
  assert [name for _, name in spec.weight_layers] == ['hidden'] * 2 + ['deep'] + ['factor'] * 2 + \
      ['wide'] * 2
  np.testing.assert_array_equal(spec.initial_trainable[USER], 0.0)   # u starts at zero
  emb = spec.initial_trainable[EMB]
  assert 0.0 < np.std(emb) < 0.5                                    # E: small random


def test_with_a_zero_user_vector_it_is_the_wide_model():
  """u = 0: the same predictions as rating_wide_mlp with the same shared weights, which are
  5 sigmoid(v . relu(W x + c) + w . x + b) computed in numpy."""
  spec, wide = _spec(), _spec('rating_wide_mlp')
  w = _shared(spec)
  shared = w[:EMB] + w[USER + 1:]
  x = _inputs()
  expected = 5.0 / (1.0 + np.exp(-_numpy_wide(shared, x).ravel()))
  np.testing.assert_allclose(_predict(wide, shared, x), expected, rtol=1e-5)
  np.testing.assert_allclose(_predict(spec, w, x), expected, rtol=1e-5)


def test_factor_term_is_the_movie_embedding_times_the_user_vector():
  """E^T rows (movies 0, 1, 2) = (1, -1), (0.5, 2), (-2, 0.25), u = (0.5, -1): movie 2 gets
  -1 - 0.25 = -1.25, movie 0 gets 0.5 + 1 = 1.5, movie 1 gets 0.25 - 2 = -1.75, added to the
  wide model's pre-sigmoid score; the non-movie inputs never reach E."""
  spec = _spec()
  w = _shared(spec)
  w[EMB] = np.array([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.25]], np.float32)
  w[USER] = np.array([0.5, -1.0], np.float32)
  x = _inputs()
  score = _numpy_wide(w[:EMB] + w[USER + 1:], x).ravel() + np.array([-1.25, 1.5, -1.75])
  np.testing.assert_allclose(_predict(spec, w, x), 5.0 / (1.0 + np.exp(-score)), rtol=1e-5)


def test_an_inner_step_adapts_the_user_vector():
  """One SGD step on a support set (MAML's inner step) moves u by -lr dL/du, with
  dL/du = mean_i 2 (r_i - y_i) r_i (1 - r_i / 5) E x_movie_i; at u = 0 E's gradient
  (mean_i ... u x_movie_i) is zero, so E moves only from the second step on."""
  spec = _spec()
  w = _shared(spec)
  x, y = _inputs(), np.array([5.0, 1.0, 4.0], np.float32)
  lr = 0.5
  trainer = Trainer(spec, losses.SQUARED_ERROR, 'sgd', lr)
  r = _predict(spec, w, x)
  movie = x[:, :MOVIES] @ w[EMB]
  grad_u = np.mean((2.0 * (r - y) * r * (1.0 - r / 5.0))[:, None] * movie, axis=0)
  assert np.all(np.abs(grad_u) > 1e-3)
  one = trainer.fit(w, x, y, steps=1)
  np.testing.assert_allclose(one[USER], -lr * grad_u, rtol=1e-4, atol=1e-7)
  np.testing.assert_array_equal(one[EMB], w[EMB])
  two = trainer.fit(w, x, y, steps=2)
  assert np.abs(two[EMB] - w[EMB]).max() > 1e-4


def test_needs_the_movie_width():
  with pytest.raises(ValueError, match='needs movies'):
    build_model_spec('rating_factor_mlp', (DIM,), 1, hidden_units=HIDDEN)
  with pytest.raises(ValueError, match='movies must be in'):
    build_model_spec('rating_factor_mlp', (DIM,), 1, hidden_units=HIDDEN, movies=DIM + 1)


def test_factor_scale_multiplies_the_term_and_speeds_the_users_step_by_its_square():
  """s <E x, u>: at s = 3 the term of u is three times the s = 1 term (same weights), and from
  u = 0 one SGD step of rate a at s = 3 moves the term s <E x, u> as a step of rate 9 a at
  s = 1 does (u' = s u: the same function, a rescaled rate for u; the other weights' steps
  differ with the rate)."""
  one, three = _spec(), _spec(factor_scale=3.0)
  w = _shared(one)
  w[EMB] = np.array([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.25]], np.float32)
  w[USER] = np.array([0.5, -1.0], np.float32)
  x = _inputs()
  base = _numpy_wide(w[:EMB] + w[USER + 1:], x).ravel()
  term = np.array([-1.25, 1.5, -1.75])
  np.testing.assert_allclose(_predict(three, w, x), 5.0 / (1.0 + np.exp(-(base + 3.0 * term))),
                             rtol=1e-5)
  w[USER][:] = 0.0
  y = np.array([5.0, 1.0, 4.0], np.float32)
  slow = Trainer(one, losses.SQUARED_ERROR, 'sgd', 0.9).fit(w, x, y, steps=1)
  fast = Trainer(three, losses.SQUARED_ERROR, 'sgd', 0.1).fit(w, x, y, steps=1)
  np.testing.assert_allclose(3.0 * fast[USER], slow[USER], rtol=1e-4, atol=1e-7)
  assert np.abs(fast[USER]).max() > 1e-3
