"""The FedMeta evaluation protocol (Chen et al. 2018, Sec. 4.1-4.2, Appendix A.2).

1. Filter clients with fewer than k samples (k = 10 / 20 / 25 for FEMNIST /
   Shakespeare / Sent140), counting them in the log.
2. Split clients 80/10/10 into train / validation / test clients by a seed:
   generalization to new clients is what is measured.
3. Split each client's data into a support set (fraction p) and a query set.
   The same division is used for every method, so comparisons are fair.
Everything is deterministic for a given seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import List, Sequence, Tuple

import numpy as np
from absl import logging

from tff_meta.data.types import ClientArrays, DataError, FederatedDataset


@dataclasses.dataclass(frozen=True)
class ClientSplit:
  client_id: str
  support: ClientArrays
  query: ClientArrays

  @property
  def all(self) -> ClientArrays:
    return ClientArrays(np.concatenate([self.support.x, self.query.x]),
                        np.concatenate([self.support.y, self.query.y]))

  def __len__(self) -> int:
    return len(self.support) + len(self.query)


@dataclasses.dataclass
class ProtocolData:
  train: List[ClientSplit]
  validation: List[ClientSplit]
  test: List[ClientSplit]
  dataset: FederatedDataset
  num_filtered: int

  def summary(self) -> str:
    count = lambda cs: sum(len(c) for c in cs)
    return (f'{self.dataset.name}: {len(self.train)} train / {len(self.validation)} validation / '
            f'{len(self.test)} test clients ({count(self.train)} / {count(self.validation)} / '
            f'{count(self.test)} examples); {self.num_filtered} clients filtered out')


def _client_seed(seed: int, client_id: str) -> int:
  digest = hashlib.sha256(f'{seed}:{client_id}'.encode()).digest()
  return int.from_bytes(digest[:8], 'little')


def validate_fraction(name: str, value: float) -> None:
  if not 0.0 < value < 1.0:
    raise ValueError(f'{name} must be in (0, 1), got {value}. Example: --{name}=0.2')


def support_query_split(arrays: ClientArrays, support_fraction: float, seed: int,
                        client_id: str) -> ClientSplit:
  """Random disjoint split: round(p * n) support examples (at least 1), the rest query."""
  validate_fraction('support_fraction', support_fraction)
  n = len(arrays)
  if n < 2:
    raise DataError(f'Client {client_id!r} has {n} examples; a support/query split needs >= 2.')
  num_support = int(np.clip(round(support_fraction * n), 1, n - 1))
  order = np.random.default_rng(_client_seed(seed, client_id)).permutation(n)
  return ClientSplit(client_id, arrays.take(np.sort(order[:num_support])),
                     arrays.take(np.sort(order[num_support:])))


def split_clients(client_ids: Sequence[str], fractions: Tuple[float, float, float],
                  seed: int) -> Tuple[List[str], List[str], List[str]]:
  if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
    raise ValueError(f'client split fractions must be 3 non-negative numbers summing to 1, got {fractions}.')
  ids = sorted(client_ids)
  order = np.random.default_rng(seed).permutation(len(ids))
  n_train = int(round(fractions[0] * len(ids)))
  n_val = int(round(fractions[1] * len(ids)))
  shuffled = [ids[i] for i in order]
  return shuffled[:n_train], shuffled[n_train:n_train + n_val], shuffled[n_train + n_val:]


def prepare(dataset: FederatedDataset, *, support_fraction: float, min_samples: int = 2,
            client_split: Tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0) -> ProtocolData:
  """Applies steps 1-3 of the protocol (see module docstring)."""
  validate_fraction('support_fraction', support_fraction)
  k = max(int(min_samples), 2)
  kept, filtered = {}, 0
  for cid, arrays in dataset.clients.items():
    if len(arrays) == 0:
      logging.warning('Client %r of %s has no samples; it is skipped.', cid, dataset.name)
      filtered += 1
    elif len(arrays) < k:
      filtered += 1
    else:
      kept[cid] = arrays
  logging.info('Filtered %d of %d clients with fewer than %d samples.', filtered,
               len(dataset.clients), k)
  if not kept:
    raise DataError(f'{dataset.name}: no client has >= {k} samples; lower min_samples.')
  train_ids, val_ids, test_ids = split_clients(list(kept), client_split, seed)
  if not train_ids or not test_ids:
    raise DataError(f'{dataset.name}: {len(kept)} clients are too few for a {client_split} split.')
  make = lambda ids: [support_query_split(kept[c], support_fraction, seed, c) for c in ids]
  return ProtocolData(make(train_ids), make(val_ids), make(test_ids), dataset, filtered)
