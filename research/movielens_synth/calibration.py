"""Baseline statistics of a MovieLens-shaped folder, to calibrate generated data.

Issue #15 measured these on the real ml-100k (80% of users train, test users
keep 80% of their ratings as support, query = the rest). A generated folder
(`research.movielens_synth.synth`) is a fair development stand-in only if the
same statistics land near them; `statistics(dataset)` computes them without
TensorFlow, from the task's own split (`tasks.rating_tasks`), baselines
(`baselines.item_biases`, `baselines.bias_predictions`) and metrics:

  stars_k           share of ratings with k stars (k = 1..5)
  bias_rmse_S       RMSE of mu + b_i + b_u (b_u from the support set), sampling S
  item_rmse_S       RMSE of mu + b_i (no user term)
  item_p@k_S        Precision@k (relevant = rating 5) of ranking each test user's
                    query items by their mean training rating (an item no
                    training user rated gets mu)
  item_p4@k_S       the same ranking, relevant = rating >= 4
with S in (chronological, random) and k in (1, 3, 10).

`factor_statistics(dataset)` measures how much latent-factor structure the
ratings hold beyond biases, by the protocol of scikit-surprise's published
ml-100k benchmark table (5-fold cross-validation over all ratings, default
settings; `PUBLISHED_ML100K`, from the package's own documentation):

  surprise_baseline_rmse  BaselineOnly (mu + b_u + b_i, fitted by ALS)
  surprise_svd_rmse       SVD (biased matrix factorisation, 100 factors)

On ml-100k a factor model gains 0.010 RMSE over the biases this way; a
generated folder whose factors gain much more would flatter every method that
learns item factors (docs/RESULTS.md of 3ab6296, 8a').

A generated folder knows each rating's expected stars
(`movielens_synth.expected_ratings`); `oracle_statistics` scores predicting
them on the same test users' query sets, an upper bound of what the folder
allows (no real-data counterpart):

  oracle_rmse_S     RMSE of the expected stars
  oracle_p@k_S      Precision@k (relevant = rating 5) of ranking by them
  oracle_p4@k_S     the same ranking, relevant = rating >= 4
"""

from __future__ import annotations

from typing import Dict, Iterator, Mapping, Tuple

import numpy as np

from tff_meta.core.tables import markdown_table
from tff_meta.data.movielens import RatingsDataset
from tff_meta.recommendation import baselines, metrics, tasks

# ml-100k, issue #15 (seed-0 user split, 80% support, Koren's shrinkages 25 / 10).
REAL_ML100K = {
    'stars_1': 0.061, 'stars_2': 0.114, 'stars_3': 0.271, 'stars_4': 0.342, 'stars_5': 0.212,
    'bias_rmse_chronological': 0.9459, 'bias_rmse_random': 0.9318,
    'item_rmse_chronological': 1.0096, 'item_rmse_random': 1.0280,
    'item_p@1_chronological': 0.307, 'item_p@3_chronological': 0.307,
    'item_p@10_chronological': 0.244,
    'item_p@1_random': 0.444, 'item_p@3_random': 0.383, 'item_p@10_random': 0.290,
    'item_p4@1_chronological': 0.698, 'item_p4@3_chronological': 0.681,
    'item_p4@10_chronological': 0.618,
    'item_p4@1_random': 0.730, 'item_p4@3_random': 0.744, 'item_p4@10_random': 0.661,
}
# ml-100k, scikit-surprise's benchmark table (README / PyPI description of scikit-surprise 1.1.x,
# "Movielens 100k": 5-fold cross-validation, RMSE): Baseline 0.944, SVD 0.934.
PUBLISHED_ML100K = {'surprise_baseline_rmse': 0.944, 'surprise_svd_rmse': 0.934}
SAMPLINGS = ('chronological', 'random')
K_VALUES = (1, 3, 10)


def _item_means(items: np.ndarray, ratings: np.ndarray) -> Dict[int, float]:
  """{item: its mean training rating} (unshrunk, as issue #15 ranked)."""
  ids, index = np.unique(items, return_inverse=True)
  sums = np.bincount(index, ratings)
  counts = np.bincount(index)
  return dict(zip(ids.tolist(), (sums / counts).tolist()))


def _item_users(ds: RatingsDataset) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
  """{user: (item ids [n, 1], ratings [n])}, in time order."""
  return {u: (np.asarray(r.features['item'], np.int64)[:, None],
              np.asarray(r.ratings, np.float64)) for u, r in ds.clients.items()}


def _splits(users, seed: int, support_fraction: float, train_user_fraction: float
            ) -> Iterator[Tuple[str, tasks.RatingTasks]]:
  """(sampling, the task's split of `users`) for each of `SAMPLINGS`."""
  for sampling in SAMPLINGS:
    yield sampling, tasks.rating_tasks(
        users, support_fraction=support_fraction, train_support_fraction=0.5,
        train_user_fraction=train_user_fraction, seed=seed, sampling=sampling)


def _precisions(name: str, ranked, truth) -> Dict[str, float]:
  """{name_p@k_S-style keys: Precision@k, relevant = 5 then >= 4} (`name` ends in _S)."""
  prefix, sampling = name.rsplit('_', 1)
  out = {f'{prefix}_p@{k}_{sampling}': metrics.precision_at_k(ranked, truth, k) for k in K_VALUES}
  out.update({f'{prefix}_p4@{k}_{sampling}': metrics.precision_at_k(ranked, truth, k, relevant=4.0)
              for k in K_VALUES})
  return out


def statistics(ds: RatingsDataset, *, seed: int = 0, support_fraction: float = 0.8,
               train_user_fraction: float = 0.8,
               item_shrinkage: float = baselines.ITEM_SHRINKAGE,
               user_shrinkage: float = baselines.USER_SHRINKAGE) -> Dict[str, float]:
  """The module doc's statistics of `ds` (a loaded MovieLens-shaped folder)."""
  users = _item_users(ds)
  all_ratings = np.concatenate([y for _, y in users.values()])
  out = {f'stars_{k}': float(np.mean(all_ratings == k)) for k in range(1, 6)}
  for sampling, split in _splits(users, seed, support_fraction, train_user_fraction):
    items = np.concatenate([e.all_x[:, 0] for e in split.train])
    ratings = np.concatenate([e.all_y for e in split.train])
    mu, b_item = baselines.item_biases(items, ratings, item_shrinkage)
    test = {e.user: {'support_item': e.support_x[:, 0], 'support_rating': e.support_y,
                     'query_item': e.query_x[:, 0]} for e in split.test}
    truth = [e.query_y for e in split.test]
    out[f'bias_rmse_{sampling}'] = metrics.rmse(
        baselines.bias_predictions(mu, b_item, test, user_shrinkage), truth)
    item_only = [np.clip(mu + np.array([b_item.get(int(i), 0.0) for i in e.query_x[:, 0]]), 1, 5)
                 for e in split.test]
    out[f'item_rmse_{sampling}'] = metrics.rmse(item_only, truth)
    means = _item_means(items, ratings)
    ranked = [np.array([means.get(int(i), mu) for i in e.query_x[:, 0]]) for e in split.test]
    out.update(_precisions(f'item_{sampling}', ranked, truth))
  return out


def factor_statistics(ds: RatingsDataset, *, folds: int = 5, seed: int = 0) -> Dict[str, float]:
  """The module doc's surprise statistics of `ds`: mean test RMSE over `folds` folds."""
  import pandas as pd                       # pylint: disable=g-import-not-at-top
  import surprise                           # pylint: disable=g-import-not-at-top
  from surprise import model_selection      # pylint: disable=g-import-not-at-top
  rows = [(u, int(i), float(r)) for u, c in ds.clients.items()
          for i, r in zip(c.features['item'], c.ratings)]
  data = surprise.Dataset.load_from_df(pd.DataFrame(rows, columns=['user', 'item', 'rating']),
                                       surprise.Reader(rating_scale=(1, 5)))
  out = {}
  for key, algo in (('surprise_baseline_rmse', surprise.BaselineOnly(verbose=False)),
                    ('surprise_svd_rmse', surprise.SVD(random_state=seed))):
    folds_ = model_selection.KFold(n_splits=folds, random_state=seed, shuffle=True)
    out[key] = float(np.mean(model_selection.cross_validate(
        algo, data, measures=['rmse'], cv=folds_, n_jobs=1)['test_rmse']))
  return out


def oracle_statistics(ds: RatingsDataset, expected: Mapping[Tuple[int, int], float], *,
                      seed: int = 0, support_fraction: float = 0.8,
                      train_user_fraction: float = 0.8) -> Dict[str, float]:
  """The module doc's oracle statistics: `expected` ({(user id, item id): expected stars},
  `movielens_synth.expected_ratings`) as the prediction of each test user's query ratings."""
  out = {}
  for sampling, split in _splits(_item_users(ds), seed, support_fraction, train_user_fraction):
    try:
      predicted = [np.array([expected[int(e.user), int(i)] for i in e.query_x[:, 0]])
                   for e in split.test]
    except KeyError as missing:
      raise ValueError(f'No expected rating for (user, item) {missing}: not the generator\'s '
                       'folder?') from None
    truth = [e.query_y for e in split.test]
    out[f'oracle_rmse_{sampling}'] = metrics.rmse(predicted, truth)
    out.update(_precisions(f'oracle_{sampling}', predicted, truth))
  return out


def format_statistics(stats: Dict[str, float],
                      reference: Dict[str, float] = {**REAL_ML100K, **PUBLISHED_ML100K}) -> str:
  """A two-column table: these statistics beside the reference (real ml-100k)."""
  return markdown_table(['statistic', 'this folder', 'real ml-100k'],
                        [[key, f'{value:.4f}', '' if reference.get(key) is None
                          else f'{reference[key]:.4f}'] for key, value in stats.items()])
