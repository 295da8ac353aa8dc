"""Dataset statistics in the columns of FedMeta's Table 1 (Chen et al. 2018, Sec. 3).

Table 1 reports, per dataset: clients, samples, classes, samples per client
(mean, stdev) and classes per client (min, max). `dataset_stats` computes
them for any `FederatedDataset`, optionally after the protocol's filter
(clients with fewer than `min_samples` samples are dropped, as
`protocol.prepare` does). "Classes" counts the labels that occur (FedMeta's
Shakespeare has 70 of its 80 characters), next to the declared
`num_classes`. The stdev is the population standard deviation (numpy's
default, as LEAF's statistics script prints).
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence

import numpy as np

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


def dataset_stats(dataset: FederatedDataset, min_samples: int = 0) -> DatasetStats:
  """Table 1 statistics of `dataset`; clients with < min_samples samples are left out.

  Empty clients are always left out (they hold no data to count).
  """
  sizes, per_client_classes, labels = [], [], []
  filtered = 0
  for arrays in dataset.clients.values():
    n = len(arrays)
    if n == 0 or n < min_samples:
      filtered += 1
      continue
    sizes.append(n)
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


def format_table(stats: Sequence[DatasetStats]) -> str:
  """A plain-text table with `HEADER` and one row per `DatasetStats`."""
  rows = [HEADER] + [s.row() for s in stats]
  widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
  lines = ['  '.join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                     enumerate(zip(r, widths))) for r in rows]
  lines.insert(1, '  '.join('-' * w for w in widths))
  return '\n'.join(lines)
