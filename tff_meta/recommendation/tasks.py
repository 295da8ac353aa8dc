"""Users as tasks: the user split and support/query episodes.

Chen et al. 2018b, Sec. 3.1: each user is a task; 80% of the users (drawn by
seed) train and the rest test. A test user in the "p Support" setting uses
the fraction p of its ratings as the support set and the rest as the query
set; a training task uses all of its user's data, the fraction
`train_support_fraction` as support and the rest as query (Fig. 3 varies it,
20-80%). `sampling` names how a user's records are split (`movielens.SPLITS`):
'chronological' (the default: the query set is the user's latest records and
no support record is later than a query record; the paper's production task,
Table 6) or 'random' (sets of the same sizes drawn at random, seeded by the
seed and the user id; the paper's MovieLens text says only "a fraction of
data", Sec. 3.1).
"""

from __future__ import annotations

import collections
import dataclasses
import zlib
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

from tff_meta.data.movielens import SPLITS
from tff_meta.data.protocol import validate_fraction
from tff_meta.data.types import DataError


@dataclasses.dataclass
class Episode:
  """One user's support and query arrays (y: float ratings or int labels)."""
  user: str
  support_x: np.ndarray
  support_y: np.ndarray
  query_x: np.ndarray
  query_y: np.ndarray

  def tensors(self) -> 'collections.OrderedDict':
    """The episode as a FedMeta client value (`personalized.episode_spec`)."""
    return collections.OrderedDict(support_x=self.support_x, support_y=self.support_y,
                                   query_x=self.query_x, query_y=self.query_y)

  @property
  def all_x(self) -> np.ndarray:
    return np.concatenate([self.support_x, self.query_x])

  @property
  def all_y(self) -> np.ndarray:
    return np.concatenate([self.support_y, self.query_y])


def split_users(user_ids: Sequence[str], train_fraction: float, seed: int, stream: int = 6
                ) -> Tuple[List[str], List[str]]:
  """Seeded split into (training users, testing users), both non-empty."""
  validate_fraction('train_user_fraction', train_fraction)
  ids = list(user_ids)
  if len(ids) < 2:
    raise DataError(f'{len(ids)} user(s): at least one training and one testing user are needed.')
  order = np.random.default_rng([seed, stream]).permutation(len(ids))
  num_train = min(max(int(round(train_fraction * len(ids))), 1), len(ids) - 1)
  return ([ids[i] for i in sorted(order[:num_train])],
          [ids[i] for i in sorted(order[num_train:])])


def episode(user: str, x: np.ndarray, y: np.ndarray, support_fraction: float,
            query_fraction: float, sampling: str = 'chronological', seed: int = 0,
            stream: Sequence[int] = ()) -> Episode:
  """The episode of time-ordered (x, y) by `SPLITS[sampling]` (random: seeded by seed, user and
  `stream`). A training user split anew at each visit (`train_split = "per_episode"`) passes
  all its ratings and the episode number as `stream`: the meta-learner then sees many
  support/query splits of each user, as Chen et al. 2018b's production task samples each
  training episode anew (Sec. 3.2); a chronological split ignores the seed, so it is the
  user's one split."""
  s, q = SPLITS.get(sampling)(len(y), support_fraction, query_fraction,
                              seed=[seed, zlib.crc32(user.encode()), *stream])
  return Episode(user, x[s], y[s], x[q], y[q])


@dataclasses.dataclass
class RatingTasks:
  """MovieLens tasks: training episodes (meta-training), testing episodes and validation
  episodes (held-out training users; empty without validation_fraction)."""
  train: List[Episode]
  test: List[Episode]
  feature_dim: int
  validation: List[Episode] = dataclasses.field(default_factory=list)

  def summary(self) -> str:
    n = lambda eps: sum(len(e.support_y) + len(e.query_y) for e in eps)
    return (f'{len(self.train)} training users ({n(self.train)} ratings), {len(self.test)} '
            f'testing users ({sum(len(e.support_y) for e in self.test)} support / '
            f'{sum(len(e.query_y) for e in self.test)} query ratings)'
            + (f', {len(self.validation)} validation users' if self.validation else ''))


def rating_tasks(users: Dict[str, Tuple[np.ndarray, np.ndarray]], *, support_fraction: float,
                 train_support_fraction: float, train_user_fraction: float = 0.8,
                 seed: int = 0, sampling: str = 'chronological',
                 validation_fraction: float = 0.0) -> RatingTasks:
  """Episodes from {user: (features [n, d], ratings [n])}, both in time order.

  Test users: support = fraction `support_fraction`, query = the rest.
  Training users: support = `train_support_fraction`, query = the rest.
  validation_fraction > 0: that fraction of the training users (a second seeded draw) is held
  out as `validation`, split as test users are (model selection and rate sweeps score them,
  never the test users).
  """
  validate_fraction('support_fraction', support_fraction)
  validate_fraction('train_support_fraction', train_support_fraction)
  train_ids, test_ids = split_users(sorted(users, key=_numeric_first), train_user_fraction, seed)
  val_ids = []
  if validation_fraction > 0:
    train_ids, val_ids = split_users(train_ids, 1.0 - validation_fraction, seed, stream=7)
  make = lambda ids, p: [episode(u, *users[u], p, 1.0 - p, sampling, seed) for u in ids]
  dim = next(iter(users.values()))[0].shape[1]
  return RatingTasks(train=make(train_ids, train_support_fraction),
                     test=make(test_ids, support_fraction), feature_dim=dim,
                     validation=make(val_ids, support_fraction))


def _numeric_first(user_id: str):
  return (0, int(user_id), '') if user_id.isdigit() else (1, 0, user_id)


def encode_users(users: Dict[str, object], encode: Callable) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
  """{user: UserRatings} -> {user: (encode(user), ratings)}."""
  return {u: (encode(r), np.asarray(r.ratings, np.float32)) for u, r in users.items()}
