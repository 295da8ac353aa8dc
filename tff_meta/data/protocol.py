"""The FedMeta evaluation protocol (Chen et al. 2018, Sec. 4.1-4.2, Appendix A.2).

1. Filter clients with fewer than k samples (k = 10 / 20 / 25 for FEMNIST /
   Shakespeare / Sent140), counting them in the log. With `draw_clients`, a
   file holding more clients than the paper's (FEMNIST: 1,068 writers,
   Table 1) gives that many of those kept, drawn by the seed.
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
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from tff_meta.data.types import ClientArrays, DataError, FederatedDataset


class ClientSplit:
  """One client's support, query and (a known client's) holdout sets.

  Built with the arrays (`ClientSplit(client_id, support, query, holdout)`),
  or by `on_demand` from the client's size and the split's recipe only: the
  indices of each part are drawn from (seed, client id, n) when a part is
  used, and the client's arrays come from `source(client_id)` (a cached
  reader for clients read on demand), so a split holds no examples.
  """
  __slots__ = ('client_id', '_fixed', '_source', '_plan', '_n', '_ops')

  def __init__(self, client_id: str, support: ClientArrays, query: ClientArrays,
               holdout: Optional[ClientArrays] = None):
    self.client_id, self._fixed = client_id, (support, query, holdout)
    self._source = self._plan = self._n = None
    self._ops = ()

  @classmethod
  def on_demand(cls, client_id: str, source: Callable[[str], ClientArrays], plan: 'SplitPlan',
                n: int, ops: Tuple = ()) -> 'ClientSplit':
    """The split `plan` gives a client of `n` examples, its arrays read by `source(client_id)`;
    `ops` are the later derivations, in order: ('round', seed, round) or ('known',)."""
    split = cls.__new__(cls)
    split.client_id, split._fixed = client_id, None
    split._source, split._plan, split._n, split._ops = source, plan, int(n), tuple(ops)
    return split

  def _derive(self, op: Tuple) -> 'ClientSplit':
    return ClientSplit.on_demand(self.client_id, self._source, self._plan, self._n,
                                 self._ops + (op,))

  def sizes(self) -> Tuple[int, int, Optional[int]]:
    """(support, query, holdout or None) sizes, without reading the client."""
    if self._fixed is not None:
      s, q, h = self._fixed
      return len(s), len(q), (None if h is None else len(h))
    s, q, h = self._plan.sizes(self._n)
    for op in self._ops:
      if op[0] == 'known':
        s, q, h = s + q, h, None
    return s, q, h

  def indices(self) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """The rows of the client's arrays in the support, query and holdout sets (on demand)."""
    s, q, h = self._plan.indices(self._n, self.client_id)
    for op in self._ops:
      if op[0] == 'round':
        s, q = _redraw(np.concatenate([s, q]), len(s), op[1], op[2], self.client_id)
      else:
        s, q, h = np.concatenate([s, q]), h, None
    return s, q, h

  def parts(self) -> Tuple[ClientArrays, ClientArrays, Optional[ClientArrays]]:
    """(support, query, holdout or None), reading the client once."""
    if self._fixed is not None:
      return self._fixed
    arrays = self._source(self.client_id)
    s, q, h = self.indices()
    return arrays.take(s), arrays.take(q), (None if h is None else arrays.take(h))

  @property
  def support(self) -> ClientArrays:
    return self.parts()[0]

  @property
  def query(self) -> ClientArrays:
    return self.parts()[1]

  @property
  def holdout(self) -> Optional[ClientArrays]:
    """A known client's local test set (None for other clients)."""
    return None if self.sizes()[2] is None else self.parts()[2]

  @property
  def num_support(self) -> int:
    return self.sizes()[0]

  @property
  def all(self) -> ClientArrays:
    """The client's training data: support and query (never the holdout)."""
    if self._fixed is None:
      s, q, _ = self.indices()
      return self._source(self.client_id).take(np.concatenate([s, q]))
    support, query, _ = self._fixed
    return ClientArrays(np.concatenate([support.x, query.x]),
                        np.concatenate([support.y, query.y]))

  def known_split(self) -> 'ClientSplit':
    """A known client's evaluation split: adapt on all its training data, score the holdout."""
    if self.sizes()[2] is None:
      raise ValueError(f'Client {self.client_id!r} has no local test set; set known_test_fraction > 0.')
    if self._fixed is None:
      return self._derive(('known',))
    return ClientSplit(self.client_id, self.all, self._fixed[2])

  def __len__(self) -> int:
    s, q, h = self.sizes()
    return s + q + (h or 0)

  def __repr__(self) -> str:
    return f'ClientSplit({self.client_id!r}, sizes={self.sizes()})'


@dataclasses.dataclass
class ProtocolData:
  train: List[ClientSplit]
  validation: List[ClientSplit]
  test: List[ClientSplit]
  dataset: FederatedDataset
  num_filtered: int
  num_not_drawn: int = 0   # clients that passed the filter but were not drawn (draw_clients)

  def summary(self) -> str:
    count = lambda cs: sum(len(c) for c in cs)
    drawn = (f'; {self.num_not_drawn} more not drawn (draw_clients)' if self.num_not_drawn
             else '')
    return (f'{self.dataset.name}: {len(self.train)} train / {len(self.validation)} validation / '
            f'{len(self.test)} test clients ({count(self.train)} / {count(self.validation)} / '
            f'{count(self.test)} examples); {self.num_filtered} clients filtered out{drawn}')


def client_seed(seed: int, client_id: str) -> int:
  """A client's seed under `seed`, the same in every process (not Python's salted hash)."""
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


def split_indices(n: int, support_fraction: float, seed: int, client_id: str,
                  name: str = 'support_fraction') -> Tuple[np.ndarray, np.ndarray]:
  """Random disjoint rows of a client of `n`: round(p * n) support, the rest query, each
  sorted; a DataError when either would be empty (`name`: the fraction's key)."""
  validate_fraction(name, support_fraction)
  if n < 2:
    raise DataError(f'Client {client_id!r} has {n} examples; a support/query split needs >= 2.')
  num_support = split_size(support_fraction, n)
  if not 1 <= num_support <= n - 1:
    raise DataError(f'Client {client_id!r} has {n} examples: {name} = {support_fraction} gives '
                    f'it {num_support} and {n - num_support}, and neither may be 0; raise '
                    f'min_samples or change {name}.')
  order = np.random.default_rng(client_seed(seed, client_id)).permutation(n)
  return np.sort(order[:num_support]), np.sort(order[num_support:])


class SplitPlan(NamedTuple):
  """How `prepare` splits a client, from its size, the seed and its id only.

  With known_test_fraction > 0 the client first holds out that fraction as its
  local test set (drawn with seed + 7919), then splits the rest by
  support_fraction.
  """
  support_fraction: float
  seed: int
  known_test_fraction: float = 0.0

  def sizes(self, n: int) -> Tuple[int, int, Optional[int]]:
    held = split_size(self.known_test_fraction, n) if self.known_test_fraction else None
    rest = n - (held or 0)
    num_support = split_size(self.support_fraction, rest)
    return num_support, rest - num_support, held

  def indices(self, n: int, client_id: str) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    if not self.known_test_fraction:
      return split_indices(n, self.support_fraction, self.seed, client_id) + (None,)
    held, rest = split_indices(n, self.known_test_fraction, self.seed + 7919, client_id,
                               'known_test_fraction')
    if len(rest) < 2:
      raise DataError(f'Client {client_id!r} has {n} examples; after holding out '
                      f'{self.known_test_fraction:.0%} as its local test set fewer than 2 remain '
                      'for training.')
    support, query = split_indices(len(rest), self.support_fraction, self.seed, client_id)
    return rest[support], rest[query], held


def support_query_split(arrays: ClientArrays, support_fraction: float, seed: int,
                        client_id: str, name: str = 'support_fraction') -> ClientSplit:
  """Random disjoint split: round(p * n) support examples, the rest query; a DataError when
  either would be empty (`name`: the fraction's key, for the message)."""
  support, query = split_indices(len(arrays), support_fraction, seed, client_id, name)
  return ClientSplit(client_id, arrays.take(support), arrays.take(query))


def _redraw(rows: np.ndarray, num_support: int, seed: int, round_num: int,
            client_id: str) -> Tuple[np.ndarray, np.ndarray]:
  order = np.random.default_rng(
      [client_seed(seed, client_id), int(round_num)]).permutation(len(rows))
  return rows[np.sort(order[:num_support])], rows[np.sort(order[num_support:])]


def resample_split(split: ClientSplit, seed: int, round_num: int) -> ClientSplit:
  """A new random support/query division of `split`'s training data for round `round_num`.

  FedMeta Algorithm 1, line 13: each episode samples D_S^u and D_Q^u. The
  support set keeps the fixed split's size (round(p * n), so the fraction p
  holds), the two stay disjoint and together hold all of `split.all`; the
  holdout (a known client's local test set) is kept as it is. Deterministic
  in (seed, round_num, client_id): a resumed run draws what the uninterrupted
  one drew. A split read on demand stays so (the draw is made when it is used).
  """
  if split._fixed is None:   # pylint: disable=protected-access
    return split._derive(('round', seed, round_num))   # pylint: disable=protected-access
  arrays = split.all
  support, query = _redraw(np.arange(len(arrays)), split.num_support, seed, round_num,
                           split.client_id)
  return ClientSplit(split.client_id, arrays.take(support), arrays.take(query), split.holdout)


def draw_clients(client_ids: Sequence[str], count: int, seed: int) -> List[str]:
  """`count` of `client_ids` drawn by `seed` (all of them, sorted, when there are no
  more; 0 = all). The draw is independent of `split_clients`' permutation."""
  ids = sorted(client_ids)
  if not count or len(ids) <= count:
    return ids
  rng = np.random.default_rng([int(seed), 1068])
  return sorted(ids[i] for i in rng.choice(len(ids), size=int(count), replace=False))


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
  support, query, held = SplitPlan(support_fraction, seed, fraction).indices(len(arrays),
                                                                              client_id)
  return ClientSplit(client_id, arrays.take(support), arrays.take(query), arrays.take(held))


def client_splits(dataset: FederatedDataset, client_ids: Sequence[str], plan: SplitPlan,
                  ) -> List[ClientSplit]:
  """`plan`'s splits of `client_ids`, built from their sizes: no client is read until used."""
  sizes, source = dataset.sizes(), dataset.clients.__getitem__
  return [ClientSplit.on_demand(c, source, plan, sizes[c]) for c in client_ids]


def prepare(dataset: FederatedDataset, *, support_fraction: float, min_samples: int = 2,
            client_split: Tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0,
            known_test_fraction: float = 0.0, draw_clients_count: int = 0) -> ProtocolData:
  """Applies steps 1-3 of the protocol (see module docstring); `draw_clients_count` > 0 keeps
  that many of the clients that pass the filter, drawn by `seed` (`draw_clients`)."""
  validate_fraction('support_fraction', support_fraction)
  if known_test_fraction:
    validate_fraction('known_test_fraction', known_test_fraction)
  k = max(int(min_samples), 2)
  kept, filtered = {}, 0
  for cid, n in dataset.sizes().items():
    if n == 0:
      logging.warning('Client %r of %s has no samples; it is skipped.', cid, dataset.name)
      filtered += 1
    elif n < k:
      filtered += 1
    else:
      kept[cid] = n
  logging.info('Filtered %d of %d clients with fewer than %d samples.', filtered,
               len(dataset.clients), k)
  if not kept:
    raise DataError(f'{dataset.name}: no client has >= {k} samples; lower min_samples.')
  not_drawn = 0
  if draw_clients_count and len(kept) > draw_clients_count:
    drawn = draw_clients(list(kept), draw_clients_count, seed)
    logging.info('Drew %d of the %d clients kept (draw_clients, seed %d).', len(drawn),
                 len(kept), seed)
    not_drawn = len(kept) - len(drawn)
    kept = {c: kept[c] for c in drawn}
  empty = empty_split_sizes(kept.values(), support_fraction, known_test_fraction)
  if empty:
    clients = sum(n in empty for n in kept.values())
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
  plan = SplitPlan(support_fraction, seed)
  train = client_splits(dataset, train_ids, plan._replace(known_test_fraction=known_test_fraction))
  return ProtocolData(train, client_splits(dataset, val_ids, plan),
                      client_splits(dataset, test_ids, plan), dataset, filtered, not_drawn)
