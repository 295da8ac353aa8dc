"""SELF baselines on tiny logs with known answers; SVD++ through scikit-surprise."""

import numpy as np
import pytest

from tff_meta.recommendation import baselines
from tff_meta.recommendation.service import Categorical


def test_mfu_ranks_by_support_counts():
  support = np.array([2, 0, 2, 1, 2, 0])          # counts: 0 -> 2, 1 -> 1, 2 -> 3
  scores = baselines.mfu_scores(support, num_query=2, num_classes=4)
  assert scores.shape == (2, 4)
  np.testing.assert_array_equal(np.argsort(-scores[0], kind='stable'), [2, 0, 1, 3])


def test_mru_uses_every_earlier_event():
  # Events 0..3 are history, 4..6 the query: labels 1, 0, 2, 0 | 1, 3, 2.
  history = np.array([1, 0, 2, 0, 1, 3, 2])
  scores = baselines.mru_scores(history, query_start=4, num_query=3, num_classes=4)
  rank = lambda row: list(np.argsort(-row, kind='stable')[:3])
  assert rank(scores[0]) == [0, 2, 1]             # last uses: 0 @3, 2 @2, 1 @0; 3 never
  assert scores[0][3] == -np.inf
  assert rank(scores[1]) == [1, 0, 2]             # query event 4 (label 1) is now known
  assert rank(scores[2]) == [3, 1, 0]
  # Unknown (-1) events are skipped.
  s = baselines.mru_scores(np.array([0, -1, 1]), 2, 1, 2)
  assert list(s[0]) == [0, -np.inf]


def test_naive_bayes_by_hand():
  # One feature 'hour' with 2 values; classes 0, 1; alpha = 1.
  support = Categorical({'hour': np.array([0, 0, 1, 1, 1])}, {'hour': 2})
  y = np.array([0, 0, 0, 1, 1])
  query = Categorical({'hour': np.array([0, 1])}, {'hour': 2})
  s = baselines.naive_bayes_scores(support, y, query, num_classes=2, alpha=1.0)
  # P(y=0) ~ 3+1, P(y=1) ~ 2+1; P(h=0|0) = (2+1)/(3+2), P(h=1|0) = (1+1)/5,
  # P(h=0|1) = (0+1)/(2+2), P(h=1|1) = (2+1)/4.
  expected = np.log([[4 * 3 / 5, 3 * 1 / 4], [4 * 2 / 5, 3 * 3 / 4]])
  np.testing.assert_allclose(s, expected, rtol=1e-12)
  assert list(np.argmax(s, 1)) == [0, 1]


def test_svdpp_global_and_self():
  pytest.importorskip('surprise')
  # Item 1 is loved by everyone, item 2 disliked: SVD++ must rank them that way for a new user.
  train = [(f'u{u}', i, r) for u in range(8) for i, r in ((1, 5.0), (2, 1.0), (3, 3.0))]
  users = {'new': {'support_item': np.array([3]), 'support_rating': np.array([3.0]),
                   'query_item': np.array([1, 2])}}
  (pred,) = baselines.svdpp_global(train, users, seed=0, n_epochs=30)
  assert pred.shape == (2,) and pred[0] > 3.5 > 2.5 > pred[1]
  (own,) = baselines.svdpp_self(users, seed=0)
  # Trained on one rating of 3, unknown items get about the global mean (3).
  np.testing.assert_allclose(own, [3.0, 3.0], atol=0.01)


def test_bias_baseline_by_hand():
  # Training ratings: item 1 -> 5, 4; item 2 -> 1. mu = 10/3; lambda_item = 1:
  # b_1 = (5/3 + 2/3) / (1 + 2) = 7/9, b_2 = (-7/3) / (1 + 1) = -7/6; item 3 unseen: 0.
  mu, b_item = baselines.item_biases(np.array([1, 1, 2]), np.array([5., 4., 1.]), 1.0)
  assert mu == pytest.approx(10 / 3)
  assert b_item == pytest.approx({1: 7 / 9, 2: -7 / 6})
  # Test user: support item 2 -> 3, item 3 -> 5; residuals 5/6 and 5/3; lambda_user = 2:
  # b_u = 2.5 / (2 + 2) = 0.625; queries: item 1 -> mu + 7/9 + 0.625, item 3 -> mu + 0.625.
  users = {'a': {'support_item': np.array([2, 3]), 'support_rating': np.array([3., 5.]),
                 'query_item': np.array([1, 3])},
           'b': {'support_item': np.array([2]), 'support_rating': np.array([1.]),
                 'query_item': np.array([2])}}
  preds = baselines.bias_predictions(mu, b_item, users, user_shrinkage=2.0)
  np.testing.assert_allclose(preds[0], [10 / 3 + 7 / 9 + 0.625, 10 / 3 + 0.625], rtol=1e-6)
  # User b: residual 1 - 10/3 + 7/6 = -7/6, b_u = -7/18; prediction 10/3 - 7/6 - 7/18 = 16/9.
  np.testing.assert_allclose(preds[1], [16 / 9], rtol=1e-6)


def test_bias_baseline_clips_and_needs_ratings():
  mu, b_item = baselines.item_biases(np.array([1, 1, 2]), np.array([5., 5., 1.]), 0.0)
  # mu = 11/3, b_1 = 4/3, b_2 = -8/3; support item 2 -> 5: b_u = 4 with no shrinkage.
  users = {'a': {'support_item': np.array([2]), 'support_rating': np.array([5.]),
                 'query_item': np.array([1, 2])}}
  preds = baselines.bias_predictions(mu, b_item, users, user_shrinkage=0.0)
  np.testing.assert_allclose(preds[0], [5.0, 5.0])        # 9 and 5, clipped to [1, 5]
  with pytest.raises(Exception, match='at least one training rating'):
    baselines.item_biases(np.array([], np.int64), np.array([]), 1.0)
