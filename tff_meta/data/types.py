"""In-memory federated datasets: one (x, y) array pair per client.

Every data source (the embedded digits, TFF's native sqlite files, LEAF JSON)
returns a `FederatedDataset`, so the protocol code (filtering, client splits,
support/query splits) and the programs never depend on where data came from.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

import numpy as np


class DataError(ValueError):
  """Bad or missing data; the message names the file or client and the fix."""


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
  """A federated dataset held in memory, keyed by client id (insertion-ordered).

  Attributes:
    name: the source name, e.g. 'digits' or 'emnist'.
    clients: client id -> `ClientArrays`.
    num_classes: labels are in [0, num_classes).
    element_shape: the shape of one `x` row.
    description: one line saying what the data is.
    extras: source-specific side data, e.g. a Sent140 word vocabulary and
      GloVe embedding matrix (`'vocab'`, `'embeddings'`).
  """
  name: str
  clients: Dict[str, ClientArrays]
  num_classes: int
  element_shape: Tuple[int, ...]
  description: str = ''
  extras: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    for cid, arrays in self.clients.items():
      if arrays.y.size and (arrays.y.min() < 0 or arrays.y.max() >= self.num_classes):
        raise DataError(
            f'{self.name}: client {cid!r} has labels outside [0, {self.num_classes}) '
            f'(min {arrays.y.min()}, max {arrays.y.max()}).')

  @property
  def x_dtype(self) -> np.dtype:
    first = next(iter(self.clients.values()))
    return first.x.dtype

  @property
  def num_examples(self) -> int:
    return sum(len(c) for c in self.clients.values())
