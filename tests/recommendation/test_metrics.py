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
