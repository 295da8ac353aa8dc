"""MovieLens-100k as a federated rating dataset: one client per user, ratings in time order.

Chen et al., *Federated Meta-Learning for Recommendation* (Sec. 3.1): 943
users rate 1,682 movies; the model input encodes the movie (ID, genres) and
the user (gender, age, occupation) and the rating time, and the target is
the rating in [1, 5]. Their protocol splits each user chronologically
(Sec. 3.2, Table 6): the last 20% of the user's records are the query set
and the fraction p of records just before them the support set
(`chronological_split`). Their MovieLens text (Sec. 3.1) says only "a
fraction of data"; `random_split` draws sets of the same sizes at random
(`SPLITS` names both).

Files, from GroupLens' ml-100k.zip (https://grouplens.org/datasets/movielens/100k/):

  u.data  tab-separated  user id, item id, rating (1-5), unix timestamp
  u.user  `|`-separated  user id|age|gender (M/F)|occupation|zip code
  u.item  `|`-separated, latin-1, 24 fields: item id|title|release date|
          video release date|IMDb URL|19 genre flags (0/1, `GENRES` order)
  u.occupation (optional) one occupation per line: fixes the occupation ids;
          without it they are the sorted occupations found in u.user.

Targets are real-valued ratings, so this is a `RatingsDataset`, not a
`FederatedDataset`. A malformed line raises DataError with file and line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from tff_meta.data import checks, movielens_atomic
from tff_meta.data.protocol import validate_fraction
from tff_meta.data.types import DataError
from tff_meta.core.registry import Registry

# ml-100k's u.genre order.
GENRES = ('unknown', 'Action', 'Adventure', 'Animation', "Children's", 'Comedy', 'Crime',
          'Documentary', 'Drama', 'Fantasy', 'Film-Noir', 'Horror', 'Musical', 'Mystery',
          'Romance', 'Sci-Fi', 'Thriller', 'War', 'Western')
GENDERS = {'M': 0, 'F': 1}
FEATURES = ('item', 'genres', 'gender', 'age', 'occupation', 'timestamp')
_FIX = ('Use the files of GroupLens\' ml-100k.zip '
        '(https://grouplens.org/datasets/movielens/100k/) unchanged.')


@dataclasses.dataclass(frozen=True)
class UserRatings:
  """One user's ratings in time order.

  features: 'item' int32 [n] (MovieLens item id, 1-based), 'genres' float32
    [n, 19] (the movie's genre flags), 'gender' int32 [n] (0 = M, 1 = F),
    'age' int32 [n], 'occupation' int32 [n] (index into
    `RatingsDataset.occupations`), 'timestamp' int64 [n] (unix seconds).
  ratings: float32 [n] in [1, 5].
  """
  features: Dict[str, np.ndarray]
  ratings: np.ndarray

  def __len__(self) -> int:
    return len(self.ratings)

  def take(self, indices: np.ndarray) -> 'UserRatings':
    return UserRatings({k: v[indices] for k, v in self.features.items()}, self.ratings[indices])


@dataclasses.dataclass
class RatingsDataset:
  """Per-user rating arrays plus the metadata a model needs for its embeddings."""
  name: str
  clients: Dict[str, UserRatings]
  num_users: int
  num_items: int
  max_item_id: int
  occupations: Tuple[str, ...]
  genres: Tuple[str, ...] = GENRES
  titles: Dict[int, str] = dataclasses.field(default_factory=dict)
  description: str = ''

  def __post_init__(self):
    checks.check_ratings(self)   # finite features, ratings in [1, 5]; or dropped (opt-in)

  @property
  def num_occupations(self) -> int:
    return len(self.occupations)

  @property
  def num_ratings(self) -> int:
    return sum(len(c) for c in self.clients.values())

  def fingerprint(self) -> str:
    """16 hex digits of a SHA-256 over what the methods see: every user's id, feature arrays
    and ratings (dtype, shape and bytes), the occupations and genres. Equal for the same data
    in either file format (GroupLens' or RecBole's), at any path; any changed rating changes
    it. Runs record it (results.json `data_fingerprint`) so reports pool seeds only over the
    same data (analysis/recommend_report.py)."""
    h = hashlib.sha256()
    def add(a):
      a = np.ascontiguousarray(a)
      h.update(f'{a.dtype.str}{a.shape}'.encode())
      h.update(a.tobytes())
    h.update(repr((self.occupations, tuple(self.genres))).encode())
    for user in sorted(self.clients):
      h.update(user.encode() + b'\0')
      data = self.clients[user]
      for key in sorted(data.features):
        h.update(key.encode())
        add(data.features[key])
      add(data.ratings)
    return h.hexdigest()[:16]


def _lines(path: str, encoding: str):
  """Yields (line number, line) of non-empty lines."""
  try:
    with open(path, encoding=encoding) as f:
      for lineno, line in enumerate(f, start=1):
        line = line.rstrip('\r\n')
        if line.strip():
          yield lineno, line
  except UnicodeDecodeError as e:
    raise DataError(f'{path}: not {encoding} text ({e}). ' + _FIX) from e
  except OSError as e:
    raise DataError(f'Cannot read {path!r}: {e.strerror}.') from e


def _fail(path: str, lineno: int, problem: str, line: str) -> DataError:
  return DataError(f'{path}, line {lineno}: {problem} (line starts {line[:60]!r}). ' + _FIX)


def _int(path, lineno, line, value, what) -> int:
  try:
    return int(value)
  except ValueError:
    raise _fail(path, lineno, f'{what} {value!r} is not an integer', line) from None


def _read_occupations(path: str) -> Optional[List[str]]:
  if not os.path.isfile(path):
    return None
  return [line.strip() for _, line in _lines(path, 'latin-1')]


def _read_users(path: str, occupation_list: Optional[List[str]]):
  rows = {}
  for lineno, line in _lines(path, 'latin-1'):
    parts = line.split('|')
    if len(parts) != 5:
      raise _fail(path, lineno, f'expected 5 `|`-separated fields (id|age|gender|occupation|zip), '
                  f'found {len(parts)}', line)
    uid = _int(path, lineno, line, parts[0], 'user id')
    age = _int(path, lineno, line, parts[1], 'age')
    if parts[2] not in GENDERS:
      raise _fail(path, lineno, f'gender must be M or F, found {parts[2]!r}', line)
    if uid in rows:
      raise _fail(path, lineno, f'user id {uid} appears twice', line)
    rows[uid] = (age, GENDERS[parts[2]], parts[3], lineno, line)
  if not rows:
    raise DataError(f'{path}: no users. ' + _FIX)
  occupations = occupation_list or sorted({r[2] for r in rows.values()})
  index = {o: i for i, o in enumerate(occupations)}
  users = {}
  for uid, (age, gender, occupation, lineno, line) in rows.items():
    if occupation not in index:
      raise _fail(path, lineno, f'occupation {occupation!r} is not in u.occupation', line)
    users[uid] = (gender, age, index[occupation])
  return users, tuple(occupations)


def _read_items(path: str):
  genres, titles = {}, {}
  for lineno, line in _lines(path, 'latin-1'):
    parts = line.split('|')
    if len(parts) != 5 + len(GENRES):
      raise _fail(path, lineno, f'expected {5 + len(GENRES)} `|`-separated fields (id|title|'
                  f'release date|video release date|URL|19 genre flags), found {len(parts)}', line)
    iid = _int(path, lineno, line, parts[0], 'item id')
    flags = parts[5:]
    if any(f not in ('0', '1') for f in flags):
      raise _fail(path, lineno, 'genre flags must be 0 or 1', line)
    if iid in genres:
      raise _fail(path, lineno, f'item id {iid} appears twice', line)
    genres[iid] = np.array([f == '1' for f in flags], np.float32)
    titles[iid] = parts[1]
  if not genres:
    raise DataError(f'{path}: no items. ' + _FIX)
  return genres, titles


def _read_ratings(path: str, users, items) -> Dict[int, List[Tuple[int, int, float]]]:
  """user id -> [(timestamp, item, rating)] in file order."""
  out: Dict[int, list] = {}
  for lineno, line in _lines(path, 'latin-1'):
    parts = line.split('\t')
    if len(parts) != 4:
      raise _fail(path, lineno, 'expected 4 tab-separated fields (user id, item id, rating, '
                  f'timestamp), found {len(parts)}', line)
    uid = _int(path, lineno, line, parts[0], 'user id')
    iid = _int(path, lineno, line, parts[1], 'item id')
    try:
      rating = float(parts[2])
    except ValueError:
      raise _fail(path, lineno, f'rating {parts[2]!r} is not a number', line) from None
    ts = _int(path, lineno, line, parts[3], 'timestamp')
    if not 1.0 <= rating <= 5.0:
      raise _fail(path, lineno, f'rating {parts[2]} is outside [1, 5]', line)
    if uid not in users:
      raise _fail(path, lineno, f'user id {uid} is not in u.user', line)
    if iid not in items:
      raise _fail(path, lineno, f'item id {iid} is not in u.item', line)
    out.setdefault(uid, []).append((ts, iid, rating))
  if not out:
    raise DataError(f'{path}: no ratings. ' + _FIX)
  return out


def load_movielens(path: str, min_ratings: int = 0, max_users: int = 0) -> RatingsDataset:
  """Reads ml-100k from folder `path`: GroupLens' files (module doc) or RecBole's atomic files.

  Args:
    path: the unzipped ml-100k folder (u.data, u.user, u.item), or a folder
      with one RecBole atomic dataset (<name>.inter, .user, .item;
      `movielens_atomic`), read first when both are there.
    min_ratings: > 0 drops users with fewer ratings (ml-100k: every user has
      at least 20).
    max_users: > 0 keeps the users with the N smallest ids.

  Returns:
    `RatingsDataset` 'movielens100k' with one client per user (id = the
    user id as a string, in increasing id order), ratings sorted by
    timestamp (ties keep file order).
  """
  atomic = movielens_atomic.find(path) if os.path.isdir(path) else None
  if atomic:
    users, occupations = movielens_atomic.read_users(atomic['.user'], GENDERS)
    genres, titles = movielens_atomic.read_items(atomic['.item'], GENRES)
    ratings = movielens_atomic.read_ratings(atomic['.inter'], users, genres)
  else:
    missing = [n for n in ('u.data', 'u.user', 'u.item')
               if not os.path.isfile(os.path.join(path, n))]
    if missing:
      raise DataError(f'MovieLens-100k files {missing} not found in {path!r}: the folder must '
                      'hold u.data, u.user and u.item (GroupLens\' ml-100k.zip, '
                      'https://grouplens.org/datasets/movielens/100k/, unzipped), or RecBole\'s '
                      'atomic files ml-100k.inter, ml-100k.user and ml-100k.item.')
    occupation_list = _read_occupations(os.path.join(path, 'u.occupation'))
    users, occupations = _read_users(os.path.join(path, 'u.user'), occupation_list)
    genres, titles = _read_items(os.path.join(path, 'u.item'))
    ratings = _read_ratings(os.path.join(path, 'u.data'), users, genres)
  ids = sorted(ratings)
  if min_ratings > 0:
    ids = [u for u in ids if len(ratings[u]) >= min_ratings]
  if max_users > 0:
    ids = ids[:max_users]
  clients = {}
  for uid in ids:
    rows = ratings[uid]
    order = np.argsort(np.array([r[0] for r in rows], np.int64), kind='stable')
    rows = [rows[i] for i in order]
    n = len(rows)
    gender, age, occupation = users[uid]
    items = np.array([r[1] for r in rows], np.int32)
    features = {
        'item': items,
        'genres': np.stack([genres[i] for i in items]),
        'gender': np.full(n, gender, np.int32),
        'age': np.full(n, age, np.int32),
        'occupation': np.full(n, occupation, np.int32),
        'timestamp': np.array([r[0] for r in rows], np.int64),
    }
    clients[str(uid)] = UserRatings(features, np.array([r[2] for r in rows], np.float32))
  return RatingsDataset(
      name='movielens100k', clients=clients, num_users=len(users), num_items=len(genres),
      max_item_id=max(genres), occupations=occupations, titles=titles,
      description=(f'MovieLens-100k from {path}: {len(clients)} users, '
                   f'{sum(len(c) for c in clients.values())} ratings in time order'))


def _round_half_up(x: float) -> int:
  return int(math.floor(x + 0.5 + 1e-9))


def _split_sizes(n: int, support_fraction: float, query_fraction: float) -> Tuple[int, int]:
  """(|support|, |query|): query round(query_fraction * n) clipped to [1, n - 1], support
  round(support_fraction * n) clipped to [1, n - |query|] (rounding half up)."""
  validate_fraction('support_fraction', support_fraction)
  validate_fraction('query_fraction', query_fraction)
  if n < 2:
    raise DataError(f'{n} records cannot be split into non-empty support and query sets.')
  num_query = min(max(_round_half_up(query_fraction * n), 1), n - 1)
  num_support = min(max(_round_half_up(support_fraction * n), 1), n - num_query)
  return num_support, num_query


def chronological_split(n: int, support_fraction: float, query_fraction: float = 0.2,
                        seed=None) -> Tuple[np.ndarray, np.ndarray]:
  """Support and query indices into n time-ordered records (recommendation protocol).

  The query set is the last round(query_fraction * n) records (at least 1);
  the support set is the round(support_fraction * n) records just before it,
  clipped to [1, n - |query|] (rounding half up). Records before the
  support set are unused. Fractions must be in (0, 1) (ValueError). `seed`
  is unused (the signature of `SPLITS`).
  """
  del seed
  num_support, num_query = _split_sizes(n, support_fraction, query_fraction)
  end = n - num_query
  return np.arange(end - num_support, end), np.arange(end, n)


def random_split(n: int, support_fraction: float, query_fraction: float = 0.2,
                 seed=0) -> Tuple[np.ndarray, np.ndarray]:
  """Support and query indices of the sizes `chronological_split` gives, drawn at random.

  The query set is a random subset (seeded by `seed`, an int or a sequence of
  ints) and the support set a random subset of the other records; each set
  is returned in increasing (time) order. A support record may be later
  than a query record.
  """
  num_support, num_query = _split_sizes(n, support_fraction, query_fraction)
  order = np.random.default_rng(seed).permutation(n)
  return np.sort(order[num_query:num_query + num_support]), np.sort(order[:num_query])


# Support/query sampling of a user's records: name -> f(n, support_fraction, query_fraction, seed).
SPLITS: Registry = Registry('support/query sampling')
SPLITS.add('chronological', chronological_split)
SPLITS.add('random', random_split)


def split_user(user: UserRatings, support_fraction: float,
               query_fraction: float = 0.2) -> Tuple[UserRatings, UserRatings]:
  """(support, query) of one user by `chronological_split`."""
  support, query = chronological_split(len(user), support_fraction, query_fraction)
  return user.take(support), user.take(query)
