"""Item latent factors from the training users' ratings, by alternating least squares.

Koren, Bell and Volinsky 2009 ("Matrix factorization techniques for recommender
systems", Sec. "Learning algorithms"): the residual of a rating after the bias
baseline, r_ui - mu - b_i - b_u, is modelled as p_u . q_i, and

    min_{p, q}  sum_(u,i) (res_ui - p_u . q_i)^2 + penalty (|p_u|^2 + |q_i|^2)

is solved by alternating the two ridge regressions (each user's p_u with q
fixed, then each item's q_i with p fixed). Here b_u is the user's mean
residual after mu + b_i (unshrunk), so each user's residuals are centred.

Two users (issue #15):
- `precision_ceiling`'s two-stage ranking (these factors, then a ridge of a test
  user's support residuals on them);
- `warm_start`'s `factors` start of `rating_factor_mlp`, whose movie embedding E
  starts at these q_i (in a federation: the same alternating solves, the user
  half on each device, the item half from per-item sufficient statistics
  a^T a and a^T r summed by the server; Ammad-ud-din et al. 2019, "Federated
  collaborative filtering". This module computes them centrally, as the bias
  start computes mu and b_i, from the training users only).
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import numpy as np

# The two-stage model's settings (docs/RESULTS.md of 3ab6296, 8a': 8 factors, the earlier
# generator's number;
# penalty 5 on both sides; 10 alternations).
FACTORS = 8
PENALTY = 5.0
ITERATIONS = 10


def centred_residuals(items: Sequence[np.ndarray], ratings: Sequence[np.ndarray], mu: float,
                      b_item: Dict[int, float]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(user index, item id, residual) of every rating; user k's are `items[k]` / `ratings[k]`;
  residual = r - mu - b_i minus the user's mean of that (b_u)."""
  users, ids, res = [], [], []
  for k, (i, r) in enumerate(zip(items, ratings)):
    i = np.asarray(i, np.int64).ravel()
    r = np.asarray(r, np.float64).ravel() - mu - np.array([b_item.get(int(j), 0.0) for j in i])
    users.append(np.full(len(i), k))
    ids.append(i)
    res.append(r - (r.mean() if len(r) else 0.0))
  return (np.concatenate(users).astype(np.int64), np.concatenate(ids).astype(np.int64),
          np.concatenate(res))


def als_item_factors(users: np.ndarray, items: np.ndarray, residuals: np.ndarray,
                     factors: int = FACTORS, penalty: float = PENALTY,
                     iterations: int = ITERATIONS, seed: int = 0, rows: int = 0) -> np.ndarray:
  """[max(rows, max item id + 1), factors] item factors q (row i = item id i) of the module doc's
  problem. Items start at N(0, 0.1^2) (seeded), users at 0; an item id no rating has keeps 0
  (`rows` covers a catalogue's ids that no training rating has, e.g. one only a test user rated)."""
  users, items = np.asarray(users, np.int64), np.asarray(items, np.int64)
  residuals = np.asarray(residuals, np.float64)
  if not len(items):
    raise ValueError('ALS needs at least one rating.')
  rated = np.unique(items)
  rng = np.random.default_rng(seed)
  q = np.zeros((max(int(rows), int(items.max()) + 1), int(factors)))
  q[rated] = rng.normal(0.0, 0.1, (len(rated), int(factors)))
  num_users = int(users.max()) + 1
  p = np.zeros((num_users, int(factors)))
  order_u, order_i = np.argsort(users, kind='stable'), np.argsort(items, kind='stable')
  by_user = np.split(order_u, np.cumsum(np.bincount(users, minlength=num_users))[:-1])
  by_item = np.split(order_i, np.cumsum(np.bincount(items))[:-1])
  eye = float(penalty) * np.eye(int(factors))
  for _ in range(int(iterations)):
    for u, idx in enumerate(by_user):
      if len(idx):
        a = q[items[idx]]
        p[u] = np.linalg.solve(a.T @ a + eye, a.T @ residuals[idx])
    for i in rated:
      idx = by_item[i]
      a = p[users[idx]]
      q[i] = np.linalg.solve(a.T @ a + eye, a.T @ residuals[idx])
  return q
