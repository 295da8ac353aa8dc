"""Recommendation metrics, per user and averaged over users.

Chen et al. 2018b ("Federated Meta-Learning for Recommendation"):
- RMSE over all query ratings (Table 3);
- Precision@k (Table 3): per user, the fraction of the k query movies with the
  highest predicted score whose true rating is 5, averaged over users. A user
  with fewer than k query ratings is scored on all of them (denominator
  min(k, n)). Ties in the predicted score keep the query order (stable sort).
  The paper's "ground-truth score 5" is `relevant=5`; `relevant=4` (rating
  >= 4, the common convention elsewhere) is reported as a labelled extra;
- NDCG@k (not in the paper; Jarvelin & Kekalainen 2002, graded gains
  2^rating - 1 as in Burges et al. 2005): per user, DCG@k of the query items
  in predicted order over DCG@k of the ideal order, discount 1 / log2(rank + 1),
  averaged over users (same ties and min(k, n) rule as Precision@k);
- Top-k accuracy (Table 6): the fraction of query events whose label is among
  the k highest-scored classes, over all query events. A label outside the
  user's label space (given as -1) is always a miss.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def rmse(predictions: Sequence[np.ndarray], ratings: Sequence[np.ndarray]) -> float:
  """Root mean squared error over all ratings of all users."""
  p = np.concatenate([np.ravel(x) for x in predictions]).astype(np.float64)
  r = np.concatenate([np.ravel(x) for x in ratings]).astype(np.float64)
  if p.shape != r.shape or not p.size:
    raise ValueError(f'rmse needs equally many predictions and ratings (> 0), got {p.size} '
                     f'and {r.size}.')
  return float(np.sqrt(np.mean((p - r) ** 2)))


def user_precision_at_k(predicted: np.ndarray, ratings: np.ndarray, k: int,
                        relevant: float = 5.0) -> float:
  """One user's Precision@k: relevant ratings among the top-k predicted."""
  if k < 1:
    raise ValueError(f'k must be >= 1, got {k}.')
  predicted, ratings = np.ravel(predicted), np.ravel(ratings)
  if not len(ratings):
    raise ValueError('Precision@k of a user with no query ratings is undefined.')
  top = np.argsort(-predicted, kind='stable')[:k]
  return float(np.mean(ratings[top] >= relevant))


def precision_at_k(predictions: Sequence[np.ndarray], ratings: Sequence[np.ndarray], k: int,
                   relevant: float = 5.0) -> float:
  """Precision@k averaged over users (users with no query ratings are skipped)."""
  values = [user_precision_at_k(p, r, k, relevant)
            for p, r in zip(predictions, ratings) if len(np.ravel(r))]
  return float(np.mean(values)) if values else float('nan')


def user_ndcg_at_k(predicted: np.ndarray, ratings: np.ndarray, k: int) -> float:
  """One user's NDCG@k with gains 2^rating - 1 (see module doc)."""
  if k < 1:
    raise ValueError(f'k must be >= 1, got {k}.')
  predicted, ratings = np.ravel(predicted), np.ravel(ratings).astype(np.float64)
  if not len(ratings):
    raise ValueError('NDCG@k of a user with no query ratings is undefined.')
  gains = np.power(2.0, ratings) - 1.0
  discount = 1.0 / np.log2(np.arange(2, min(k, len(ratings)) + 2))
  dcg = gains[np.argsort(-predicted, kind='stable')][:k] @ discount
  # The ideal order as a contiguous array, like `dcg`'s: a reversed view takes another BLAS
  # path on some CPUs and rounds differently, so the ideal order scored 1 + 2e-16.
  ideal = -np.sort(-gains)[:k] @ discount
  return float(dcg / ideal) if ideal > 0 else 0.0


def ndcg_at_k(predictions: Sequence[np.ndarray], ratings: Sequence[np.ndarray], k: int) -> float:
  """NDCG@k averaged over users (users with no query ratings are skipped)."""
  values = [user_ndcg_at_k(p, r, k) for p, r in zip(predictions, ratings) if len(np.ravel(r))]
  return float(np.mean(values)) if values else float('nan')


def top_k_hits(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
  """Bool [n]: label within the k highest scores ([n, C] scores; label -1 = miss).

  Ties are broken towards the smaller class index.
  """
  if k < 1:
    raise ValueError(f'k must be >= 1, got {k}.')
  scores, labels = np.asarray(scores), np.asarray(labels)
  if not len(labels):
    return np.zeros(0, bool)
  order = np.argsort(-scores, axis=1, kind='stable')[:, :k]
  return np.any(order == labels[:, None], axis=1) & (labels >= 0)


def top_k_accuracy(scores: Sequence[np.ndarray], labels: Sequence[np.ndarray], k: int) -> float:
  """Top-k accuracy over all query events of all users."""
  hits = np.concatenate([top_k_hits(s, y, k) for s, y in zip(scores, labels)])
  if not hits.size:
    raise ValueError('Top-k accuracy needs at least one query event.')
  return float(np.mean(hits))
