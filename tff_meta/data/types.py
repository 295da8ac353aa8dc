"""Federated datasets: one (x, y) array pair per client.

Every data source (the embedded digits, TFF's native sqlite files, LEAF JSON)
returns a `FederatedDataset`, so the protocol code (filtering, client splits,
support/query splits) and the programs never depend on where data came from.
Its `clients` is a dict held in memory, or a `lazy_clients.LazyClients`
that reads a client when it is used (TFF's EMNIST); the protocol needs only
`sizes()` (client id -> count), which neither reads a client.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from tff_meta.data import checks
from tff_meta.data.checks import DataError

__all__ = ['ClientArrays', 'DataError', 'FederatedDataset']


@dataclasses.dataclass(frozen=True)
class ClientArrays:
  """One client's examples: `x` of shape [n, *element_shape], `y` int32 [n]."""
  x: np.ndarray
  y: np.ndarray

  def __post_init__(self):
    if len(self.x) != len(self.y):
      raise DataError(f'x has {len(self.x)} rows but y has {len(self.y)}.')

  def __len__(self) -> int:
    return len(self.y)

  def take(self, indices: np.ndarray) -> 'ClientArrays':
    return ClientArrays(self.x[indices], self.y[indices])


@dataclasses.dataclass
class FederatedDataset:
  """A federated dataset keyed by client id (insertion-ordered).

  Attributes:
    name: the source name, e.g. 'digits' or 'emnist'.
    clients: client id -> `ClientArrays`: a dict, or a `LazyClients` that
      reads each client on use (each is checked by the data check when first read).
    num_classes: labels are in [0, num_classes).
    element_shape: the shape of one `x` row.
    description: one line saying what the data is.
    extras: source-specific side data, e.g. a Sent140 word vocabulary and
      GloVe embedding matrix (`'vocab'`, `'embeddings'`).
    source: the file or folder read, named by the data check's errors.
    x_range: (low, high) of every feature where the format defines one
      (pixels in [0, 1]); None = only finite.
    problems: client id -> (file, problem) the loader found while parsing
      (e.g. a LEAF user listed twice in a shard); the data check reports or
      drops these clients with the ones whose arrays fail it.

  Building one runs the data check (`checks.check_dataset`): a client with a
  non-finite or out-of-range feature, an example of the wrong shape or a label
  outside [0, num_classes) raises `DataError` (or, inside
  `checks.dropping_bad_clients()`, is left out); clients read on demand are
  checked as each is read.
  """
  name: str
  clients: Mapping[str, ClientArrays]
  num_classes: int
  element_shape: Tuple[int, ...]
  description: str = ''
  extras: dict = dataclasses.field(default_factory=dict)
  source: str = ''
  x_range: Optional[Tuple[float, float]] = None
  problems: Dict[str, Tuple[str, str]] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    checks.check_dataset(self)

  def _read_on_demand(self) -> bool:
    return getattr(self.clients, 'sizes', None) is not None   # a LazyClients

  def sizes(self) -> Mapping[str, int]:
    """client id -> its number of examples, without reading a client read on demand."""
    if self._read_on_demand():
      return self.clients.sizes
    return {cid: len(arrays) for cid, arrays in self.clients.items()}

  @property
  def x_dtype(self) -> np.dtype:
    first = self.clients[next(iter(self.clients))]
    return first.x.dtype

  @property
  def num_examples(self) -> int:
    return sum(self.sizes().values())

