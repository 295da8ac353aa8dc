"""`recommendation.factors`: centred residuals by hand, and ALS against a known low-rank matrix."""

import numpy as np
import pytest

from tff_meta.recommendation import factors


def test_centred_residuals_by_hand():
  """mu = 3, b_1 = 1, b_2 = -1 (item 3 unknown: 0). User 0 rates items 1, 2 with 5, 2:
  residuals 1, 0, mean 0.5 -> 0.5, -0.5. User 1 rates item 3 with 4: residual 1 -> 0."""
  users, items, res = factors.centred_residuals(
      [np.array([1, 2]), np.array([3])], [np.array([5.0, 2.0]), np.array([4.0])], 3.0,
      {1: 1.0, 2: -1.0})
  np.testing.assert_array_equal(users, [0, 0, 1])
  np.testing.assert_array_equal(items, [1, 2, 3])
  np.testing.assert_allclose(res, [0.5, -0.5, 0.0])


def test_als_recovers_a_rank_2_matrix_seen_in_full():
  """Every user rates every item and the residuals are exactly P Q^T (rank 2): with a tiny
  penalty the fitted item factors span Q's columns, so a user's least-squares fit on them
  reproduces the residuals; item id 0 (never rated) keeps 0."""
  rng = np.random.default_rng(0)
  p, q = rng.normal(size=(30, 2)), rng.normal(size=(12, 2))
  users, items = np.meshgrid(np.arange(30), np.arange(1, 13), indexing='ij')
  residual = (p @ q.T).ravel()
  fitted = factors.als_item_factors(users.ravel(), items.ravel(), residual, factors=2,
                                    penalty=1e-6, iterations=50)
  assert fitted.shape == (13, 2)
  np.testing.assert_array_equal(fitted[0], 0.0)
  basis = fitted[1:]
  coef, *_ = np.linalg.lstsq(basis, (p @ q.T).T, rcond=None)
  np.testing.assert_allclose(basis @ coef, (p @ q.T).T, atol=1e-4)


def test_als_is_seeded_and_refuses_no_ratings():
  args = (np.array([0, 0, 1]), np.array([1, 2, 1]), np.array([0.5, -0.5, 0.2]))
  np.testing.assert_array_equal(factors.als_item_factors(*args, factors=2, seed=3),
                                factors.als_item_factors(*args, factors=2, seed=3))
  with pytest.raises(ValueError, match='at least one rating'):
    factors.als_item_factors(np.array([], np.int64), np.array([], np.int64), np.array([]))


def test_rows_cover_catalogue_ids_no_training_rating_has():
  args = (np.array([0, 0, 1]), np.array([1, 2, 1]), np.array([0.5, -0.5, 0.2]))
  plain = factors.als_item_factors(*args, factors=2, seed=3)
  padded = factors.als_item_factors(*args, factors=2, seed=3, rows=6)
  assert plain.shape == (3, 2) and padded.shape == (6, 2)
  np.testing.assert_array_equal(padded[:3], plain)
  np.testing.assert_array_equal(padded[3:], 0.0)
  assert factors.als_item_factors(*args, factors=2, seed=3, rows=2).shape == (3, 2)
