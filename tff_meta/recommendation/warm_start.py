"""Initial weights of the MovieLens rating models from the bias baseline (issue #15).

Chen et al. 2018b Sec. 3.1 fixes the network (hidden layer of 32, sigmoid
output scaled to [0, 5]) and MAML's 10 inner steps, and gives no
initialisation. With Keras' default one the untrained model predicts 2.5 for
every rating, and the outer loop (Alg. 1: one user per episode) has to learn
the global mean and 1,682 per-movie offsets from the query halves of single
users, one meta-step at a time. The bias baseline mu + b_i + b_u
(`baselines`) gets the same numbers in closed form from the same training
users' ratings. Measured on generated data (docs/RESULTS.md of 3ab6296, 8a'): after 500
episodes MAML was still 0.04 RMSE above the bias baseline, while the wide
model started at the baseline's mu and b_i and adapted with MAML's own 10
inner steps was already below it.

`RATING_INITS` names the choices (config key `rating_init`):
- `keras`: Keras' initialisers (the paper's silence; the wide path at zero);
- `bias`: the same weights, then the output bias at logit(mu / 5), so the
  untrained model predicts mu, and (`rating_wide_mlp`, `rating_factor_mlp`) the wide path's
  weight of each movie's one-hot input at logit((mu + b_i) / 5) - logit(mu / 5),
  so that with a silent deep path (and u = 0, as `rating_factor_mlp` builds it) the model
  predicts the bias baseline's mu + b_i before any user adaptation (b_u is the inner loop's
  job).
  mu and b_i are `baselines.item_biases` of the training users' ratings (in a
  federation: per-movie sums and counts added up by the server, sufficient
  statistics, no rating leaves a device alone). The deep path keeps its
  Keras start.

- `factors` (`rating_factor_mlp` only): the `bias` start, and the movie embedding E at item
  factors of the training users' residuals r - mu - b_i - b_u (`factors.als_item_factors`,
  as many as the model has), divided by the slope of 5 sigmoid at mu (mu (5 - mu) / 5) to
  put them in the score's units; u stays at zero, so the untrained model still predicts
  mu + b_i, and the inner loop fits the user's taste u on these factors. The structure of
  the two-stage model (ALS item factors + a per-user ridge) that reached 52% Precision@1 on
  generated data where E drawn at random did not learn (docs/RESULTS.md of 3ab6296, 8a').

NN(self) trains on the test user's data alone (the paper's SELF setting), so
it always starts from `keras`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional

import numpy as np

from tff_meta.models import keras_models
from tff_meta.recommendation import baselines
from tff_meta.recommendation import factors as factors_lib
from tff_meta.registry import Registry

MAX_RATING = 5.0
# Target ratings are clipped into [1, 4.9] before the logit (5 would be +inf).
RATING_RANGE = (1.0, 4.9)


def logit_rating(r, max_rating: float = MAX_RATING):
  """The pre-sigmoid score s with max_rating * sigmoid(s) = r."""
  p = np.asarray(r, np.float64) / max_rating
  return np.log(p / (1.0 - p))


def _output_bias_index(spec) -> int:
  """The output (pre-sigmoid) bias: the last weight of both rating models."""
  return len(spec.initial_trainable) - 1


def _wide_kernel_index(spec) -> int:
  names = [name for _, name in spec.weight_layers]
  return names.index('wide') if 'wide' in names else -1


def bias_weights(spec, mu: float, b_item: Dict[int, float]) -> List[np.ndarray]:
  """`spec`'s initial weights with the `bias` start (module doc). Movie id m (1-based) is input
  m - 1 (the encoder's first block, `features.MovieLensEncoder`)."""
  weights = [np.array(w, np.float32, copy=True) for w in spec.initial_trainable]
  base = float(logit_rating(np.clip(mu, *RATING_RANGE)))
  weights[_output_bias_index(spec)][:] = base
  wide = _wide_kernel_index(spec)
  if wide >= 0:
    items = np.array(sorted(b_item), np.int64)
    if len(items) and (items.min() < 1 or items.max() > weights[wide].shape[0]):
      raise ValueError('Movie ids must be 1 .. the number of input features.')
    offsets = [b_item[int(i)] for i in items]
    weights[wide][items - 1, 0] = logit_rating(np.clip(mu + np.asarray(offsets), *RATING_RANGE)) - base
  return weights


def _keras(spec, train_items, train_ratings, item_shrinkage, train_users):
  del train_items, train_ratings, item_shrinkage, train_users
  return [np.asarray(w) for w in spec.initial_trainable]


def _bias(spec, train_items, train_ratings, item_shrinkage, train_users):
  del train_users
  mu, b_item = baselines.item_biases(train_items, train_ratings, item_shrinkage)
  return bias_weights(spec, mu, b_item)


def _embedding_index(spec) -> int:
  names = [name for _, name in spec.weight_layers]
  if keras_models.FACTOR_LAYER not in names:
    raise ValueError('rating_init = "factors" needs a model with movie factors '
                     '(model = "rating_factor_mlp").')
  return names.index(keras_models.FACTOR_LAYER)          # E; u is the next weight


def factor_weights(spec, mu: float, b_item: Dict[int, float], users: np.ndarray,
                   items: np.ndarray, ratings: np.ndarray) -> List[np.ndarray]:
  """`bias_weights`, then E (movie id m is row m - 1) at the ALS item factors of the ratings
  (`users`: each rating's user index), in score units (module doc)."""
  emb = _embedding_index(spec)
  weights = bias_weights(spec, mu, b_item)
  movies, num_factors = weights[emb].shape
  items = np.asarray(items, np.int64)
  per_user = [np.flatnonzero(users == u) for u in np.unique(users)]
  u_index, ids, residuals = factors_lib.centred_residuals(
      [items[i] for i in per_user], [np.asarray(ratings)[i] for i in per_user], mu, b_item)
  q = factors_lib.als_item_factors(u_index, ids, residuals, num_factors, rows=movies + 1)
  if q.shape[0] != movies + 1:
    raise ValueError('Movie ids must be 1 .. the number of input features.')
  m = float(np.clip(mu, *RATING_RANGE))
  weights[emb][:] = q[1:] / (m * (MAX_RATING - m) / MAX_RATING)
  return weights


def _factors(spec, train_items, train_ratings, item_shrinkage, train_users):
  if train_users is None:
    raise ValueError('rating_init = "factors" needs each training rating\'s user.')
  mu, b_item = baselines.item_biases(train_items, train_ratings, item_shrinkage)
  return factor_weights(spec, mu, b_item, np.asarray(train_users), train_items, train_ratings)


RATING_INITS: Registry = Registry('rating_init')
RATING_INITS.add('keras', _keras)
RATING_INITS.add('bias', _bias)
RATING_INITS.add('factors', _factors)


def initialized(spec, name: str, train_items: np.ndarray, train_ratings: np.ndarray,
                item_shrinkage: float, train_users: Optional[np.ndarray] = None):
  """`spec` with its initial weights replaced by `RATING_INITS[name]` (a new ModelSpec);
  `train_users` (each rating's user index) is needed by `factors` only."""
  init: Callable = RATING_INITS.get(name)
  return dataclasses.replace(spec, initial_trainable=init(spec, train_items, train_ratings,
                                                          item_shrinkage, train_users))
