"""The FedMeta evaluation protocol (Chen et al. 2018, Sec. 4.1-4.2, Appendix A.2).

1. Filter clients with fewer than k samples (k = 10 / 20 / 25 for FEMNIST /
   Shakespeare / Sent140), counting them in the log.
2. Split clients 80/10/10 into train / validation / test clients by a seed:
   generalization to new clients is what is measured.
3. Split each client's data into a support set (fraction p) and a query set.
   The same division is used for every method, so comparisons are fair.
Everything is deterministic for a given seed.

Algorithm 1 (line 13) samples D_S and D_Q afresh in every episode. With
`resample_split` a *training* client's support/query division is drawn
again each round from its training data, with the same support size, seeded
by (seed, round, client); validation and test clients keep the fixed split
of step 3, so every method is still scored on the same query sets.

Personalized FL measures *known* clients too (FedEC Sec. 4.2: the local test
accuracy of every training client; report 003: "old" and "new" clients).
With `known_test_fraction > 0` each training client first holds out that
fraction of its data as its local test set (`ClientSplit.holdout`); training
never sees it, and `known_episode` scores it after adapting on everything
else. The client split may then have no test clients, (1, 0, 0), as in FedEC.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from tff_meta.data.types import ClientArrays, DataError, FederatedDataset


@dataclasses.dataclass(frozen=True)
class ClientSplit:
  client_id: str
  support: ClientArrays
  query: ClientArrays
  holdout: Optional[ClientArrays] = None   # a known client's local test set

  @property
  def all(self) -> ClientArrays:
    """The client's training data: support and query (never the holdout)."""
    return ClientArrays(np.concatenate([self.support.x, self.query.x]),
                        np.concatenate([self.support.y, self.query.y]))

  def known_split(self) -> 'ClientSplit':
    """A known client's evaluation split: adapt on all its training data, score the holdout."""
    if self.holdout is None:
      raise ValueError(f'Client {self.client_id!r} has no local test set; set known_test_fraction > 0.')
    return ClientSplit(self.client_id, self.all, self.holdout)

  def __len__(self) -> int:
    return len(self.support) + len(self.query) + (len(self.holdout) if self.holdout else 0)


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


def split_size(fraction: float, n: int) -> int:
  """Examples of a client of `n` that a split by `fraction` puts first: round(fraction * n)."""
  return int(round(fraction * n))


def empty_split_sizes(sizes, support_fraction: float, known_test_fraction: float = 0.0):
  """The client sizes among `sizes` whose splits leave a part empty: the support or query set
  (and, with `known_test_fraction`, the held-out local test set or the training data left)."""
  def fits(n):
    if known_test_fraction:
      held = split_size(known_test_fraction, n)
      if not (1 <= held and n - held >= 2):
        return False
      n -= held
    return 1 <= split_size(support_fraction, n) <= n - 1
  return sorted({int(n) for n in sizes if not fits(int(n))})


def support_query_split(arrays: ClientArrays, support_fraction: float, seed: int,
                        client_id: str, name: str = 'support_fraction') -> ClientSplit:
  """Random disjoint split: round(p * n) support examples, the rest query; a DataError when
  either would be empty (`name`: the fraction's key, for the message)."""
  validate_fraction(name, support_fraction)
  n = len(arrays)
  if n < 2:
    raise DataError(f'Client {client_id!r} has {n} examples; a support/query split needs >= 2.')
  num_support = split_size(support_fraction, n)
  if not 1 <= num_support <= n - 1:
    raise DataError(f'Client {client_id!r} has {n} examples: {name} = {support_fraction} gives '
                    f'it {num_support} and {n - num_support}, and neither may be 0; raise '
                    f'min_samples or change {name}.')
  order = np.random.default_rng(_client_seed(seed, client_id)).permutation(n)
  return ClientSplit(client_id, arrays.take(np.sort(order[:num_support])),
                     arrays.take(np.sort(order[num_support:])))


def resample_split(split: ClientSplit, seed: int, round_num: int) -> ClientSplit:
  """A new random support/query division of `split`'s training data for round `round_num`.

  FedMeta Algorithm 1, line 13: each episode samples D_S^u and D_Q^u. The
  support set keeps the fixed split's size (round(p * n), so the fraction p
  holds), the two stay disjoint and together hold all of `split.all`; the
  holdout (a known client's local test set) is kept as it is. Deterministic
  in (seed, round_num, client_id): a resumed run draws what the uninterrupted
  one drew.
  """
  arrays = split.all
  order = np.random.default_rng(
      [_client_seed(seed, split.client_id), int(round_num)]).permutation(len(arrays))
  num_support = len(split.support)
  return ClientSplit(split.client_id, arrays.take(np.sort(order[:num_support])),
                     arrays.take(np.sort(order[num_support:])), split.holdout)


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


def with_holdout(arrays: ClientArrays, fraction: float, seed: int, client_id: str,
                 support_fraction: float) -> ClientSplit:
  """Holds out `fraction` of a training client's data, then splits the rest (support/query)."""
  held = support_query_split(arrays, fraction, seed + 7919, client_id,   # support = the holdout
                             'known_test_fraction')
  if len(held.query) < 2:
    raise DataError(f'Client {client_id!r} has {len(arrays)} examples; after holding out '
                    f'{fraction:.0%} as its local test set fewer than 2 remain for training.')
  split = support_query_split(held.query, support_fraction, seed, client_id)
  return dataclasses.replace(split, holdout=held.support)


def prepare(dataset: FederatedDataset, *, support_fraction: float, min_samples: int = 2,
            client_split: Tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0,
            known_test_fraction: float = 0.0) -> ProtocolData:
  """Applies steps 1-3 of the protocol (see module docstring)."""
  validate_fraction('support_fraction', support_fraction)
  if known_test_fraction:
    validate_fraction('known_test_fraction', known_test_fraction)
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
  empty = empty_split_sizes([len(a) for a in kept.values()], support_fraction,
                            known_test_fraction)
  if empty:
    clients = sum(len(a) in empty for a in kept.values())
    known = f', known_test_fraction = {known_test_fraction}' if known_test_fraction else ''
    example = '' if known else (f'; e.g. {empty[0]}: round({support_fraction} * {empty[0]}) = '
                                f'{split_size(support_fraction, empty[0])} support examples')
    raise DataError(
        f'{dataset.name}: support_fraction = {support_fraction}{known} leaves {clients} of '
        f'{len(kept)} clients with an empty split (clients of {", ".join(map(str, empty[:5]))}'
        f'{"..." if len(empty) > 5 else ""} examples{example}); set min_samples to {empty[-1] + 1} (it is {k}) to drop them, or '
        'change support_fraction.')
  train_ids, val_ids, test_ids = split_clients(list(kept), client_split, seed)
  if not train_ids or not (test_ids or known_test_fraction):
    raise DataError(f'{dataset.name}: {len(kept)} clients are too few for a {client_split} split '
                    '(it needs train and test clients, or known_test_fraction > 0).')
  make = lambda ids: [support_query_split(kept[c], support_fraction, seed, c) for c in ids]
  if known_test_fraction:
    train = [with_holdout(kept[c], known_test_fraction, seed, c, support_fraction)
             for c in train_ids]
  else:
    train = make(train_ids)
  return ProtocolData(train, make(val_ids), make(test_ids), dataset, filtered)
