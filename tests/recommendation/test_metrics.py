"""Precision@k, Top-k and RMSE against hand-computed examples."""

import numpy as np
import pytest

from tff_meta.recommendation import metrics


def test_precision_at_k_by_hand():
  # User A: predicted order (by score) is items 2, 0, 3, 1; true ratings 5, 3, 5, 4.
  pred_a, true_a = np.array([4.0, 1.0, 4.5, 2.0]), np.array([5.0, 3.0, 5.0, 4.0])
  # -> top1 = [item2: 5] -> 1; top3 = [5, 5, 4] -> 2/3; top10 = all 4 -> 2/4.
  assert metrics.user_precision_at_k(pred_a, true_a, 1) == 1.0
  assert metrics.user_precision_at_k(pred_a, true_a, 3) == pytest.approx(2 / 3)
  assert metrics.user_precision_at_k(pred_a, true_a, 10) == 0.5
  # User B: best-scored item is rated 4 -> P@1 = 0; ties keep the query order.
  pred_b, true_b = np.array([3.0, 3.0, 1.0]), np.array([4.0, 5.0, 5.0])
  assert metrics.user_precision_at_k(pred_b, true_b, 1) == 0.0
  assert metrics.user_precision_at_k(pred_b, true_b, 2) == 0.5
  # Averaged over users, not over items.
  assert metrics.precision_at_k([pred_a, pred_b], [true_a, true_b], 1) == 0.5
  assert metrics.precision_at_k([pred_a, pred_b], [true_a, true_b], 3) == pytest.approx(
      (2 / 3 + 2 / 3) / 2)


def test_precision_with_rating_4_relevant_by_hand():
  pred, true = np.array([4.0, 1.0, 4.5, 2.0]), np.array([5.0, 3.0, 4.0, 4.0])
  # Order: items 2 (4), 0 (5), 3 (4), 1 (3). Rating 5: P@1 0, P@3 1/3; rating >= 4: 1, 1, 3/4.
  assert metrics.user_precision_at_k(pred, true, 1) == 0.0
  assert metrics.user_precision_at_k(pred, true, 3) == pytest.approx(1 / 3)
  assert metrics.user_precision_at_k(pred, true, 1, relevant=4.0) == 1.0
  assert metrics.user_precision_at_k(pred, true, 3, relevant=4.0) == 1.0
  assert metrics.user_precision_at_k(pred, true, 10, relevant=4.0) == 0.75


def test_ndcg_by_hand():
  # Predicted order: items 0 (rating 3), 2 (4), 1 (5); gains 7, 15, 31.
  pred, true = np.array([0.9, 0.1, 0.5]), np.array([3.0, 5.0, 4.0])
  l3 = np.log2(3)
  assert metrics.user_ndcg_at_k(pred, true, 1) == pytest.approx(7 / 31)
  assert metrics.user_ndcg_at_k(pred, true, 2) == pytest.approx((7 + 15 / l3) / (31 + 15 / l3))
  full = (7 + 15 / l3 + 31 / 2) / (31 + 15 / l3 + 7 / 2)
  assert metrics.user_ndcg_at_k(pred, true, 3) == pytest.approx(full)
  assert metrics.user_ndcg_at_k(pred, true, 10) == pytest.approx(full)      # min(k, n) items
  assert metrics.user_ndcg_at_k(np.array([0.1, 0.5, 0.9]), true, 1) == pytest.approx(15 / 31)
  assert metrics.user_ndcg_at_k(true, true, 3) == 1.0                        # ideal order
  # Ties keep the query order; averaged over users.
  assert metrics.user_ndcg_at_k(np.zeros(2), np.array([1.0, 5.0]), 1) == pytest.approx(1 / 31)
  assert metrics.ndcg_at_k([pred, np.zeros(2)], [true, np.array([1.0, 5.0])], 1) == \
      pytest.approx((7 / 31 + 1 / 31) / 2)
  with pytest.raises(ValueError, match='k must be'):
    metrics.user_ndcg_at_k(pred, true, 0)


def test_rmse_by_hand():
  assert metrics.rmse([np.array([1.0, 2.0]), np.array([[3.0]])],
                      [np.array([2.0, 2.0]), np.array([5.0])]) == pytest.approx(np.sqrt(5 / 3))
  with pytest.raises(ValueError, match='equally many'):
    metrics.rmse([np.zeros(2)], [np.zeros(3)])


def test_top_k_by_hand():
  scores = np.array([[0.1, 0.7, 0.2],     # ranking 1, 2, 0
                     [0.5, 0.5, 0.0],     # tie: class 0 before class 1
                     [0.9, 0.0, 0.1]])
  labels = np.array([2, 1, -1])           # -1: a service outside the label space
  np.testing.assert_array_equal(metrics.top_k_hits(scores, labels, 1), [False, False, False])
  np.testing.assert_array_equal(metrics.top_k_hits(scores, labels, 2), [True, True, False])
  assert metrics.top_k_accuracy([scores[:2], scores[2:]], [labels[:2], labels[2:]], 2) == \
      pytest.approx(2 / 3)
  assert metrics.top_k_accuracy([scores], [labels], 3) == pytest.approx(2 / 3)
