"""How far Precision@k (relevant = rating 5) can rise above the item-mean ranking (issue #15).

Issue #15 asks MAML for Precision@1 >= 45% "above the item-mean ranking"; on the
generated folders every trained method sits near that ranking (docs/RESULTS.md
8a'). This module measures, without TensorFlow, what rankings of each test
user's query items reach with what the model's inputs carry (Chen et al. 2018b,
Sec. 3.1: movie id, genres, demographics, time), on the task's own split
(`tasks.rating_tasks`: seeded user split, validation users held out of the
training users, the user's support / query sets):

  item_mean        each item's mean training rating (an item no training user
                   rated gets mu): the floor, as issue #15 and `calibration`
  item_bias        the bias baseline mu + b_i + b_u (`baselines`: shrinkages 25
                   and 10, unclipped for ranking; b_u does not reorder a user)
  demo_genre       item_bias + a global ridge model of the residual on
                   genre x (gender, age group, occupation) pairs, fitted on
                   the training users: a taste any user of a demographic
                   shares, what a network without adaptation can learn
  genre_ridge_L    mu + b_i + the user's own offset and genre taste: a ridge
                   regression (penalty L, unpenalised intercept) of the user's
                   support residuals r - mu - b_i on the 19 genre flags, the
                   most the genre inputs give a user-level adaptation that is
                   linear in them
  als_ridge_L      the same regression on item factors instead of genres, the
                   factors learned from the training users' residuals by
                   alternating least squares (`als_item_factors`): a taste the
                   movie-id input can carry (an item embedding) and a user's
                   support set can fit, as matrix factorisation does
Where the generator's latents are known (`movielens_synth.latent_factors`,
scores in its latent units; module doc there), also:
  oracle           the expected stars (`movielens_synth.expected_ratings`)
  true_b_i         the true item bias alone (item_mean without its noise)
  true_b_i+genre   true b_i + p_u . q_genre_i, the user's true factor on the
                   genre part of the item's factor: everything the genre flags
                   can carry about the interaction, known exactly
  true_b_i+p.q     true b_i + p_u . q_i (the whole interaction, no time effects)
  oracle_q_ridge_10  als_ridge_10 with the true item factors q_i: the cost of
                   fitting the user's taste from the support set alone
Every ranking but the true_* ones predicts stars, so its RMSE (clipped to
[1, 5]) is reported too. Precision@k is `metrics.precision_at_k` (stable ties, min(k, n)).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tff_meta.data.movielens import RatingsDataset
from tff_meta.recommendation import baselines, metrics, tasks
from tff_meta.recommendation import factors as factors_lib
from tff_meta.recommendation.features import AGE_BOUNDS

K_VALUES = (1, 3, 10)


@dataclasses.dataclass
class Context:
  """What the rankers may use: training users' ratings, the item and user metadata."""
  train: List[tasks.Episode]                 # x = [item id], training users
  flags: Dict[int, np.ndarray]               # item id -> 19 genre flags
  demographics: Dict[str, np.ndarray]        # user -> one-hot (gender, age group, occupation)
  mu: float
  b_item: Dict[int, float]
  means: Dict[int, float]                    # item id -> mean training rating (unshrunk)
  latents: Optional[Mapping[str, np.ndarray]] = None
  expected: Optional[Mapping[Tuple[int, int], float]] = None
  cache: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

  def genres(self, items: np.ndarray) -> np.ndarray:
    return np.stack([self.flags[int(i)] for i in items]).astype(np.float64)

  def biases(self, items: np.ndarray) -> np.ndarray:
    return np.array([self.b_item.get(int(i), 0.0) for i in items], np.float64)


Ranker = Callable[[Context, tasks.Episode], np.ndarray]


def item_mean(ctx: Context, e: tasks.Episode) -> np.ndarray:
  return np.array([ctx.means.get(int(i), ctx.mu) for i in e.query_x[:, 0]])


def _user_bias(ctx: Context, e: tasks.Episode) -> float:
  """b_u of the bias baseline (`baselines.user_bias`, Koren's shrinkage)."""
  return baselines.user_bias(ctx.mu, ctx.b_item, e.support_x[:, 0], e.support_y,
                             baselines.USER_SHRINKAGE)


def item_bias(ctx: Context, e: tasks.Episode) -> np.ndarray:
  return ctx.mu + ctx.biases(e.query_x[:, 0]) + _user_bias(ctx, e)


def ridge(x: np.ndarray, y: np.ndarray, penalty: float) -> Tuple[float, np.ndarray]:
  """(c, w) minimising ||y - c - x w||^2 + penalty ||w||^2 (c unpenalised)."""
  x_mean, y_mean = x.mean(axis=0), y.mean()
  xc = x - x_mean
  w = np.linalg.solve(xc.T @ xc + penalty * np.eye(x.shape[1]), xc.T @ (y - y_mean))
  return float(y_mean - x_mean @ w), w


def genre_ridge(penalty: float) -> Ranker:
  def rank(ctx: Context, e: tasks.Episode) -> np.ndarray:
    support = e.support_x[:, 0]
    residual = e.support_y - ctx.mu - ctx.biases(support)
    c, w = ridge(ctx.genres(support), residual, penalty)
    return ctx.mu + c + ctx.biases(e.query_x[:, 0]) + ctx.genres(e.query_x[:, 0]) @ w
  return rank


def _factor_ridge(factors: Callable[[Context], np.ndarray], penalty: float) -> Ranker:
  """item_bias + the user's taste fitted (ridge, penalty) on its support residuals, as a linear
  function of the items' factors (`factors(ctx)`: [max item id + 1, f], row = item id)."""
  def rank(ctx: Context, e: tasks.Episode) -> np.ndarray:
    q = factors(ctx)
    support = e.support_x[:, 0].astype(np.int64)
    residual = e.support_y - ctx.mu - ctx.biases(support)
    c, w = ridge(q[support], residual, penalty)
    query = e.query_x[:, 0].astype(np.int64)
    return ctx.mu + c + ctx.biases(query) + q[query] @ w
  return rank


def als_item_factors(ctx: Context, factors: int = factors_lib.FACTORS,
                     penalty: float = factors_lib.PENALTY,
                     iterations: int = factors_lib.ITERATIONS, seed: int = 0) -> np.ndarray:
  """[max catalogue item id + 1, factors] item factors of the training users' residuals
  r - mu - b_i - b_u (`factors.als_item_factors`; cached in `ctx`)."""
  key = f'als_{factors}_{penalty:g}_{iterations}_{seed}'
  if key not in ctx.cache:
    users, items, residuals = factors_lib.centred_residuals(
        [t.all_x[:, 0] for t in ctx.train], [t.all_y for t in ctx.train], ctx.mu, ctx.b_item)
    # A row for every catalogue id (ml-100k's 1682 is rated by one test user only).
    ctx.cache[key] = factors_lib.als_item_factors(users, items, residuals, factors, penalty,
                                                  iterations, seed, rows=max(ctx.flags) + 1)
  return ctx.cache[key]


def _pairs(ctx: Context, user: str, items: np.ndarray) -> np.ndarray:
  """[n, 19 * demographics] genre x demographic indicator pairs of `user` rating `items`."""
  g = ctx.genres(items)
  return (g[:, :, None] * ctx.demographics[user][None, None, :]).reshape(len(items), -1)


def demo_genre(ctx: Context, e: tasks.Episode, penalty: float = 100.0) -> np.ndarray:
  if 'demo_genre' not in ctx.cache:
    xs, ys = [], []
    for t in ctx.train:
      residual = t.all_y - ctx.mu - ctx.biases(t.all_x[:, 0])
      xs.append(_pairs(ctx, t.user, t.all_x[:, 0]))
      ys.append(residual - residual.mean())       # the user's own offset is not a taste
    ctx.cache['demo_genre'] = ridge(np.concatenate(xs), np.concatenate(ys), penalty)[1]
  q = e.query_x[:, 0]
  return item_bias(ctx, e) + _pairs(ctx, e.user, q) @ ctx.cache['demo_genre']


def _latent(score: Callable[[Mapping[str, np.ndarray], int, np.ndarray], np.ndarray]) -> Ranker:
  def rank(ctx: Context, e: tasks.Episode) -> np.ndarray:
    return score(ctx.latents, int(e.user) - 1, e.query_x[:, 0].astype(np.int64) - 1)
  return rank


def oracle(ctx: Context, e: tasks.Episode) -> np.ndarray:
  try:
    return np.array([ctx.expected[int(e.user), int(i)] for i in e.query_x[:, 0]])
  except KeyError as missing:
    raise ValueError(f'No expected rating for (user, item) {missing}: not this generator '
                     'seed\'s folder?') from None


def _true_q(ctx: Context) -> np.ndarray:
  return np.vstack([np.zeros((1, ctx.latents['q'].shape[1])), ctx.latents['q']])


LATENT_RANKERS: Dict[str, Ranker] = {
    'oracle': oracle,
    'true_b_i': _latent(lambda z, u, i: z['b_item'][i]),
    'true_b_i+genre': _latent(lambda z, u, i: z['b_item'][i] + z['q_genre'][i] @ z['p'][u]),
    'true_b_i+p.q': _latent(lambda z, u, i: z['b_item'][i] + z['q'][i] @ z['p'][u]),
    'oracle_q_ridge_10': _factor_ridge(_true_q, 10.0),
}


def rankers(penalties: Sequence[float], factors: int = 8) -> Dict[str, Ranker]:
  """The module doc's feature-based rankers, one genre_ridge and als_ridge per penalty."""
  out = {'item_mean': item_mean, 'item_bias': item_bias, 'demo_genre': demo_genre}
  out.update({f'genre_ridge_{p:g}': genre_ridge(p) for p in penalties})
  als = lambda ctx: als_item_factors(ctx, factors)
  out.update({f'als_ridge_{p:g}': _factor_ridge(als, p) for p in penalties})
  return out


def _demographics(ds: RatingsDataset) -> Dict[str, np.ndarray]:
  sizes = (2, len(AGE_BOUNDS) + 1, ds.num_occupations)
  out = {}
  for u, r in ds.clients.items():
    v = np.zeros(sum(sizes))
    f = r.features
    v[int(f['gender'][0])] = 1.0
    v[sizes[0] + int(np.searchsorted(AGE_BOUNDS, int(f['age'][0]), side='right'))] = 1.0
    v[sizes[0] + sizes[1] + int(f['occupation'][0])] = 1.0
    out[u] = v
  return out


def split(ds: RatingsDataset, *, seed: int, support_fraction: float = 0.8,
          train_user_fraction: float = 0.8, validation_fraction: float = 0.2,
          sampling: str = 'chronological') -> tasks.RatingTasks:
  """The task's episodes of `ds` (x = [item id]), the training users' split being irrelevant."""
  users = {u: (np.asarray(r.features['item'], np.int64)[:, None], np.asarray(r.ratings, np.float64))
           for u, r in ds.clients.items()}
  return tasks.rating_tasks(users, support_fraction=support_fraction, train_support_fraction=0.5,
                            train_user_fraction=train_user_fraction, seed=seed, sampling=sampling,
                            validation_fraction=validation_fraction)


def context(ds: RatingsDataset, episodes: tasks.RatingTasks, latents=None, expected=None
            ) -> Context:
  flags = {}
  for r in ds.clients.values():
    for i, g in zip(r.features['item'], r.features['genres']):
      flags[int(i)] = np.asarray(g, np.float64)
  if latents is not None:
    known = np.stack([flags[i] for i in sorted(flags)])
    if not np.array_equal(known, latents['flags'][np.array(sorted(flags)) - 1]):
      raise ValueError('The folder\'s genre flags differ from the generator\'s: not written by '
                       'this generator seed with the default knobs.')
  items = np.concatenate([t.all_x[:, 0] for t in episodes.train])
  ratings = np.concatenate([t.all_y for t in episodes.train])
  mu, b_item = baselines.item_biases(items, ratings, baselines.ITEM_SHRINKAGE)
  ids, index = np.unique(items, return_inverse=True)
  means = dict(zip(ids.tolist(), (np.bincount(index, ratings) / np.bincount(index)).tolist()))
  return Context(episodes.train, flags, _demographics(ds), mu, b_item, means, latents, expected)


def scores(ctx: Context, episodes: Sequence[tasks.Episode], rank: Ranker, stars: bool = True
           ) -> Dict[str, float]:
  """{'p@k': Precision@k (relevant = 5) for `K_VALUES`} of ranking each episode's query items
  by `rank`, and 'rmse' of its scores clipped to [1, 5] if `stars` (they predict ratings)."""
  predicted = [rank(ctx, e) for e in episodes]
  truth = [e.query_y for e in episodes]
  out = {f'p@{k}': metrics.precision_at_k(predicted, truth, k) for k in K_VALUES}
  if stars:
    out['rmse'] = metrics.rmse([np.clip(p, 1.0, 5.0) for p in predicted], truth)
  return out


def interaction_spread(latents: Mapping[str, np.ndarray], users: np.ndarray, items: np.ndarray
                       ) -> Dict[str, float]:
  """Within-user standard deviations (latent units) of each part of the generator's score
  over the given (user index, item index) ratings: b_i, p.q_genre, p.q own part."""
  parts = {'b_i': latents['b_item'][items],
           'p.q_genre': np.einsum('nf,nf->n', latents['p'][users], latents['q_genre'][items]),
           'p.q_own': np.einsum('nf,nf->n', latents['p'][users],
                                latents['q'][items] - latents['q_genre'][items])}
  out = {}
  for name, v in parts.items():
    centred = v - (np.bincount(users, v) / np.maximum(np.bincount(users), 1))[users]
    out[name] = float(np.sqrt(np.mean(centred ** 2)))
  return out

