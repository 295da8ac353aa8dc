"""Deterministic per-rating features for MovieLens-100k (Chen et al. 2018b, Sec. 3.1).

"The input is a feature vector encoding movie info including ID and genre, and
user info including gender, age, occupation and rating time." The paper gives
no widths; this encoder's blocks, in order:

  item        one-hot of the movie id (1 .. max_item_id)       max_item_id
  genres      the 19 genre flags                               19
  gender      one-hot (M, F)                                   2
  age         one-hot of MovieLens' 7 age groups               7
              (<18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+)
  occupation  one-hot                                          num_occupations
  weekday     one-hot of the UTC day of the week               7
  hour        one-hot of the UTC hour                          24
  time        years since 1997-09-01 (ml-100k starts in September 1997)  1

It depends only on the dataset's metadata (max item id, occupations), never on
which users are in training or test, so every method sees the same encoding.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

import numpy as np

from tff_meta.data.movielens import GENRES, RatingsDataset, UserRatings

AGE_BOUNDS = (18, 25, 35, 45, 50, 56)
TIME_ORIGIN = 873072000            # 1997-09-01 00:00 UTC
SECONDS_PER_YEAR = 365.25 * 86400


@dataclasses.dataclass(frozen=True)
class MovieLensEncoder:
  """Maps a user's ratings to float32 [n, dim] features (see module doc)."""
  max_item_id: int
  num_occupations: int

  @classmethod
  def for_dataset(cls, ds: RatingsDataset) -> 'MovieLensEncoder':
    return cls(max_item_id=ds.max_item_id, num_occupations=ds.num_occupations)

  @property
  def blocks(self) -> Tuple[Tuple[str, int], ...]:
    return (('item', self.max_item_id), ('genres', len(GENRES)), ('gender', 2),
            ('age', len(AGE_BOUNDS) + 1), ('occupation', self.num_occupations),
            ('weekday', 7), ('hour', 24), ('time', 1))

  @property
  def dim(self) -> int:
    return sum(width for _, width in self.blocks)

  def encode(self, user: UserRatings) -> np.ndarray:
    f = user.features
    n = len(user)
    ts = np.asarray(f['timestamp'], np.int64)
    columns = {
        'item': np.asarray(f['item'], np.int64) - 1,
        'gender': np.asarray(f['gender'], np.int64),
        'age': np.searchsorted(AGE_BOUNDS, np.asarray(f['age']), side='right'),
        'occupation': np.asarray(f['occupation'], np.int64),
        'weekday': ((ts // 86400) + 3) % 7,           # 1970-01-01 was a Thursday: 0 = Monday
        'hour': (ts // 3600) % 24,
    }
    out = np.zeros((n, self.dim), np.float32)
    offset = 0
    for name, width in self.blocks:
      if name == 'genres':
        out[:, offset:offset + width] = f['genres']
      elif name == 'time':
        out[:, offset] = (ts - TIME_ORIGIN) / SECONDS_PER_YEAR
      else:
        idx = columns[name]
        if np.any(idx < 0) or np.any(idx >= width):
          raise ValueError(f'MovieLens feature {name!r} has a value outside [0, {width}); '
                           'encode users of the dataset the encoder was built for.')
        out[np.arange(n), offset + idx] = 1.0
      offset += width
    return out
