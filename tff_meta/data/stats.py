"""Dataset statistics in the columns of FedMeta's Table 1 (Chen et al. 2018, Sec. 3).

Table 1 reports, per dataset: clients, samples, classes, samples per client
(mean, stdev) and classes per client (min, max). `dataset_stats` computes
them for any `FederatedDataset`, optionally after the protocol's filter
(clients with fewer than `min_samples` samples are dropped, as
`protocol.prepare` does). "Classes" counts the labels that occur (FedMeta's
Shakespeare has 70 of its 80 characters), next to the declared
`num_classes`. The stdev is the population standard deviation (numpy's
default, as LEAF's statistics script prints).

MovieLens (`movielens.RatingsDataset`) has ratings, not classes: for it
`ratings_stats` reports users, ratings, items (rated / in the catalogue),
ratings per user (mean, stdev, min, max) and the mean rating.
`compute_stats` picks the right one for any dataset.
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence, Union

import numpy as np

from tff_meta.data.movielens import RatingsDataset
from tff_meta.data.types import FederatedDataset


@dataclasses.dataclass(frozen=True)
class DatasetStats:
  name: str
  clients: int
  samples: int
  classes: int             # distinct labels present
  num_classes: int         # declared label range
  samples_mean: float
  samples_stdev: float
  classes_min: int
  classes_max: int
  filtered: int = 0        # clients dropped by min_samples
  min_samples: int = 0

  def row(self) -> List[str]:
    return [self.name, f'{self.clients:,}', f'{self.samples:,}',
            f'{self.classes} / {self.num_classes}', f'{self.samples_mean:.1f}',
            f'{self.samples_stdev:.1f}', str(self.classes_min), str(self.classes_max)]


HEADER = ['dataset', 'clients', 'samples', 'classes (present / declared)',
          'samples/client mean', 'stdev', 'classes/client min', 'max']


def _kept_clients(clients, min_samples: int):
  """The clients with data and at least `min_samples` samples, and how many are left out."""
  kept = [c for c in clients.values() if len(c) and len(c) >= min_samples]
  return kept, len(clients) - len(kept)


def dataset_stats(dataset: FederatedDataset, min_samples: int = 0) -> DatasetStats:
  """Table 1 statistics of `dataset`; clients with < min_samples samples are left out.

  Empty clients are always left out (they hold no data to count).
  """
  sizes, per_client_classes, labels = [], [], []
  kept, filtered = _kept_clients(dataset.clients, min_samples)
  for arrays in kept:
    sizes.append(len(arrays))
    present = np.unique(arrays.y)
    per_client_classes.append(len(present))
    labels.append(present)
  sizes_arr = np.asarray(sizes, np.float64)
  classes = len(np.unique(np.concatenate(labels))) if labels else 0
  return DatasetStats(
      name=dataset.name, clients=len(sizes), samples=int(sizes_arr.sum()), classes=classes,
      num_classes=dataset.num_classes,
      samples_mean=float(sizes_arr.mean()) if sizes else 0.0,
      samples_stdev=float(sizes_arr.std()) if sizes else 0.0,
      classes_min=min(per_client_classes, default=0),
      classes_max=max(per_client_classes, default=0),
      filtered=filtered, min_samples=min_samples)


@dataclasses.dataclass(frozen=True)
class RatingsStats:
  """Per-user statistics of a `RatingsDataset` (MovieLens)."""
  name: str
  users: int
  ratings: int
  items: int               # distinct items rated
  num_items: int           # items in the catalogue (u.item)
  ratings_mean: float      # ratings per user
  ratings_stdev: float
  ratings_min: int
  ratings_max: int
  rating_mean: float       # mean rating value
  rating_stdev: float
  filtered: int = 0        # users dropped by min_samples
  min_samples: int = 0

  def row(self) -> List[str]:
    return [self.name, f'{self.users:,}', f'{self.ratings:,}',
            f'{self.items:,} / {self.num_items:,}', f'{self.ratings_mean:.1f}',
            f'{self.ratings_stdev:.1f}', str(self.ratings_min), str(self.ratings_max),
            f'{self.rating_mean:.2f}', f'{self.rating_stdev:.2f}']


RATINGS_HEADER = ['dataset', 'users', 'ratings', 'items (rated / catalogue)',
                  'ratings/user mean', 'stdev', 'min', 'max', 'rating mean', 'stdev']


def ratings_stats(dataset: RatingsDataset, min_samples: int = 0) -> RatingsStats:
  """Per-user statistics of `dataset`; users with < min_samples ratings are left out.

  Users with no ratings are always left out; stdevs are population stdevs.
  """
  sizes, items, values = [], [], []
  kept, filtered = _kept_clients(dataset.clients, min_samples)
  for user in kept:
    sizes.append(len(user))
    items.append(np.asarray(user.features['item']))
    values.append(np.asarray(user.ratings, np.float64))
  sizes_arr = np.asarray(sizes, np.float64)
  all_values = np.concatenate(values) if values else np.zeros((0,))
  return RatingsStats(
      name=dataset.name, users=len(sizes), ratings=int(sizes_arr.sum()),
      items=len(np.unique(np.concatenate(items))) if items else 0,
      num_items=dataset.num_items,
      ratings_mean=float(sizes_arr.mean()) if sizes else 0.0,
      ratings_stdev=float(sizes_arr.std()) if sizes else 0.0,
      ratings_min=int(min(sizes, default=0)), ratings_max=int(max(sizes, default=0)),
      rating_mean=float(all_values.mean()) if all_values.size else 0.0,
      rating_stdev=float(all_values.std()) if all_values.size else 0.0,
      filtered=filtered, min_samples=min_samples)


AnyStats = Union[DatasetStats, RatingsStats]


def compute_stats(dataset, min_samples: int = 0) -> AnyStats:
  """`ratings_stats` for a `RatingsDataset`, else `dataset_stats`."""
  if isinstance(dataset, RatingsDataset):
    return ratings_stats(dataset, min_samples)
  return dataset_stats(dataset, min_samples)


def format_table(stats: Sequence[AnyStats]) -> str:
  """A plain-text table with a header and one row per stats object.

  The header is `HEADER` (or `RATINGS_HEADER` for `RatingsStats`); all rows
  must be of one kind.
  """
  ratings = bool(stats) and isinstance(stats[0], RatingsStats)
  if any(isinstance(s, RatingsStats) != ratings for s in stats):
    raise ValueError('format_table: DatasetStats and RatingsStats cannot share a table.')
  header = RATINGS_HEADER if ratings else HEADER
  rows = [header] + [s.row() for s in stats]
  widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
  lines = ['  '.join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                     enumerate(zip(r, widths))) for r in rows]
  lines.insert(1, '  '.join('-' * w for w in widths))
  return '\n'.join(lines)
