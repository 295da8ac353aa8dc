"""Baselines of Chen et al. 2018b (Tables 3 and 6) and FedMeta Sec. 4.3 (Table 3).

MovieLens (Table 3):
- NN(self): the rating model trained from its initial weights on one test
  user's support set only (`Trainer`, `self_steps` steps);
- NN(pre-trained): pre-trained on the training users (the program's loop,
  one user per episode), then fine-tuned on the support set (`evaluation`);
- SVD++ (self / global), scikit-surprise's `SVDpp` as in the paper, trained on
  the test user's support set (self) or on all training users' ratings
  (global), scored on the test user's query ratings. An unknown user or item
  gets surprise's fallback (global mean plus the known biases).
- Bias (not in the paper; the floor every learned method must beat): Koren's
  baseline predictor mu + b_i + b_u (Koren 2010, "Factor in the neighbors",
  Sec. 2.1, decoupled shrunk estimates): mu = mean training rating,
  b_i = sum_u (r_ui - mu) / (lambda_item + n_i) over training users' ratings,
  and per test user b_u = sum_i (r_ui - mu - b_i) / (lambda_user + n_u) over
  the support set; predictions clipped to [1, 5]. An item no training user
  rated has b_i = 0. Koren's shrinkages: lambda_item = 25, lambda_user = 10.

Service recommendation, SELF setting (Table 6), each on the test user's own data:
- MFU: services ranked by their number of uses in the support set;
- MRU: services ranked by the recency of their last use before the query event
  (all of the user's earlier events, query events included: the device knows
  what it ran; this is why MRU does not change with the support fraction);
- NB: categorical naive Bayes on the event's categorical features, Laplace
  smoothing alpha (default 1): P(y) proportional to n_y + alpha and
  P(f = v | y) = (n_{y, f=v} + alpha) / (n_y + alpha * |f|);
- LR / NN trained from scratch (`Trainer`).
All score functions return [n_query, C] scores; larger is better.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from tff_meta.data.types import DataError
from tff_meta.recommendation.service import Categorical

# Koren's shrinkages of the bias baseline (module doc).
ITEM_SHRINKAGE = 25.0
USER_SHRINKAGE = 10.0


def mfu_scores(support_labels: np.ndarray, num_query: int, num_classes: int) -> np.ndarray:
  """Each query event's scores = support-set use counts (ties: smaller local id first)."""
  counts = np.bincount(support_labels[support_labels >= 0], minlength=num_classes)[:num_classes]
  return np.tile(counts.astype(np.float64), (num_query, 1))


def mru_scores(history_labels: np.ndarray, query_start: int, num_query: int,
               num_classes: int) -> np.ndarray:
  """Scores = index of the last use before each query event (-inf if never used)."""
  scores = np.full((num_query, num_classes), -np.inf)
  last = np.full(num_classes, -np.inf)
  for i, label in enumerate(history_labels[:query_start]):
    if label >= 0:
      last[label] = i
  for j in range(num_query):
    scores[j] = last
    label = history_labels[query_start + j]
    if label >= 0:
      last[label] = query_start + j
  return scores


def naive_bayes_scores(support: Categorical, support_labels: np.ndarray, query: Categorical,
                       num_classes: int, alpha: float = 1.0) -> np.ndarray:
  """Log-posterior scores of categorical naive Bayes (see module doc)."""
  keep = support_labels >= 0
  y = support_labels[keep]
  n_y = np.bincount(y, minlength=num_classes).astype(np.float64)
  scores = np.log(n_y + alpha)[None, :].repeat(len(next(iter(query.columns.values()))), 0)
  for name, size in support.sizes.items():
    counts = np.zeros((num_classes, size))
    np.add.at(counts, (y, support.columns[name][keep]), 1.0)
    log_p = np.log(counts + alpha) - np.log(n_y + alpha * size)[:, None]
    scores += log_p[:, query.columns[name]].T
  return scores


def item_biases(items: np.ndarray, ratings: np.ndarray, shrinkage: float
                ) -> Tuple[float, Dict[int, float]]:
  """(mu, {item: b_i}) of the bias baseline from training ratings (see module doc)."""
  items, ratings = np.asarray(items, np.int64), np.asarray(ratings, np.float64)
  if not len(ratings):
    raise DataError('The bias baseline needs at least one training rating.')
  mu = float(ratings.mean())
  ids, index = np.unique(items, return_inverse=True)
  sums = np.bincount(index, ratings - mu, minlength=len(ids))
  counts = np.bincount(index, minlength=len(ids))
  return mu, dict(zip(ids.tolist(), (sums / (shrinkage + counts)).tolist()))


def user_bias(mu: float, b_item: Dict[int, float], items: np.ndarray, ratings: np.ndarray,
              shrinkage: float) -> float:
  """b_u: the user's shrunk mean residual sum(r - mu - b_i) / (shrinkage + n) on its support set."""
  b_support = np.array([b_item.get(int(i), 0.0) for i in items], np.float64)
  residual = np.asarray(ratings, np.float64) - mu - b_support
  return float(residual.sum() / (shrinkage + len(residual)))


def bias_predictions(mu: float, b_item: Dict[int, float], users: Dict[str, Dict[str, np.ndarray]],
                     user_shrinkage: float) -> List[np.ndarray]:
  """Per test user: clip(mu + b_i + b_u, 1, 5) on its query items, b_u from its support set.

  `users[u]` has support_item, support_rating, query_item (as for SVD++).
  """
  out = []
  for u in users.values():
    b_user = user_bias(mu, b_item, u['support_item'], u['support_rating'], user_shrinkage)
    b_query = np.array([b_item.get(int(i), 0.0) for i in u['query_item']], np.float64)
    out.append(np.clip(mu + b_query + b_user, 1.0, 5.0).astype(np.float32))
  return out


def svdpp_predictions(train_triples: Sequence, query_pairs: Sequence, *, seed: int = 0,
                      **svdpp_options) -> np.ndarray:
  """SVD++ (scikit-surprise) trained on (user, item, rating) triples; predicts (user, item)."""
  try:
    import pandas as pd  # pylint: disable=g-import-not-at-top
    from surprise import Dataset, Reader, SVDpp  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise DataError('The SVD++ baselines need scikit-surprise (pinned in requirements.txt): '
                    '`pip install --no-deps scikit-surprise==1.1.5`.') from e
  if not len(train_triples):
    raise DataError('SVD++ needs at least one training rating.')
  frame = pd.DataFrame(list(train_triples), columns=['user', 'item', 'rating'])
  data = Dataset.load_from_df(frame, Reader(rating_scale=(1, 5)))
  algo = SVDpp(random_state=seed, **svdpp_options).fit(data.build_full_trainset())
  return np.array([algo.predict(u, i).est for u, i in query_pairs], np.float32)


def svdpp_self(users: Dict[str, Dict[str, np.ndarray]], **options) -> List[np.ndarray]:
  """Per test user: SVD++ on its own support ratings. `users[u]` has support/query item/rating."""
  out = []
  for uid, u in users.items():
    train = [(uid, int(i), float(r)) for i, r in zip(u['support_item'], u['support_rating'])]
    out.append(svdpp_predictions(train, [(uid, int(i)) for i in u['query_item']], **options))
  return out


def svdpp_global(train_triples: Sequence, users: Dict[str, Dict[str, np.ndarray]],
                 **options) -> List[np.ndarray]:
  """One SVD++ on all training users' ratings, scored on each test user's query items."""
  pairs = [(uid, int(i)) for uid, u in users.items() for i in u['query_item']]
  flat = svdpp_predictions(train_triples, pairs, **options)
  sizes = np.cumsum([len(u['query_item']) for u in users.values()])[:-1]
  return np.split(flat, sizes)
