"""Seeded partitioners of a centralized labelled dataset into federated clients.

Each partitioner returns one int64 index array per client (sorted ascending),
so the same function splits any (x, y) pair; `partition` applies one by name
and returns client id -> `ClientArrays`. Schemes (`PARTITIONERS`):

  label_shards    the pathological protocol of FedEC (Lan et al., Sec. 5 and
                  Table 2) and of the MNIST / CIFAR-10 report (003, 2 labels
                  per client): each of N clients gets k distinct classes and
                  every class is cut into N*k / num_classes equal pieces.
  sort_and_shard  FedAvg's non-IID MNIST split (McMahan et al. 2017, Sec. 3):
                  sort by label, cut into N*s equal shards, deal s shards to
                  every client at random (s = 2 in FedAvg, and in the
                  non-IID episodes of Few-Round Learning, Park et al. Sec. 5).
  dirichlet       per class, proportions p ~ Dir(alpha * 1_N) over the N
                  clients (Hsu et al. 2019); smaller alpha = more skewed.
  iid             a random permutation cut into N nearly equal parts.

The same seed always gives the same clients; nothing reads global state.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

import numpy as np

from tff_meta.data.types import ClientArrays, DataError
from tff_meta.core.registry import Registry

PARTITIONERS: Registry = Registry('partition scheme')


def _check_num_clients(num_clients: int, n: int) -> None:
  if num_clients < 1:
    raise DataError(f'num_clients must be >= 1, got {num_clients}.')
  if num_clients > n:
    raise DataError(f'Cannot split {n} examples into {num_clients} non-empty '
                    'clients; lower num_clients.')


def label_shards(labels: np.ndarray, num_clients: int, labels_per_client: int,
                 num_classes: int, seed: int) -> list[np.ndarray]:
  """Index arrays, one per client, each with `labels_per_client` distinct classes.

  Each class is cut into num_clients * labels_per_client / num_classes pieces;
  pieces are dealt so that no client gets the same class twice.
  """
  total = num_clients * labels_per_client
  if total % num_classes:
    raise DataError(f'num_clients * labels_per_client ({total}) must be a multiple of '
                    f'num_classes ({num_classes}) for equal label shards.')
  if labels_per_client > num_classes:
    raise DataError(f'labels_per_client={labels_per_client} exceeds num_classes={num_classes}.')
  rng = np.random.default_rng(seed)
  shards_per_class = total // num_classes
  pieces = {c: np.array_split(rng.permutation(np.flatnonzero(labels == c)), shards_per_class)
            for c in range(num_classes)}
  # Deal classes to clients: a random order of the multiset of class slots,
  # arranged so each client's slots are distinct classes.
  for _ in range(1000):
    slots = rng.permutation(np.repeat(np.arange(num_classes), shards_per_class))
    grid = slots.reshape(num_clients, labels_per_client)
    if all(len(set(row)) == labels_per_client for row in grid):
      break
  else:  # deterministic fallback: a shifted round-robin is always valid.
    grid = np.array([[(i * labels_per_client + j) % num_classes for j in range(labels_per_client)]
                     for i in range(num_clients)])
  taken = {c: 0 for c in range(num_classes)}
  clients = []
  for row in grid:
    idx = []
    for c in row:
      idx.append(pieces[c][taken[c]])
      taken[c] += 1
    clients.append(np.sort(np.concatenate(idx)))
  return clients


def shard_order(labels: np.ndarray, seed: int) -> np.ndarray:
  """The label-sorted order `sort_and_shard` cuts: by label, random within a label."""
  labels = np.asarray(labels)
  shuffled = np.random.default_rng(seed).permutation(len(labels))
  return shuffled[np.argsort(labels[shuffled], kind='stable')]


def sort_and_shard(labels: np.ndarray, num_clients: int, shards_per_client: int = 2,
                   seed: int = 0) -> list[np.ndarray]:
  """FedAvg's split: sort by label, cut num_clients * shards_per_client shards, deal them.

  Shards are consecutive runs of `shard_order(labels, seed)` of equal size
  (sizes differ by at most one when n is not a multiple of the shard count);
  each client receives `shards_per_client` shards chosen at random, so it
  sees at most `shards_per_client` classes when shards are no larger than a
  class (FedAvg: 60,000 MNIST images, 200 shards of 300, 2 per client).
  """
  labels = np.asarray(labels)
  if shards_per_client < 1:
    raise DataError(f'shards_per_client must be >= 1, got {shards_per_client}.')
  num_shards = num_clients * shards_per_client
  _check_num_clients(num_shards, len(labels))
  order = shard_order(labels, seed)
  shards = np.array_split(order, num_shards)
  deal = np.random.default_rng([seed, 1]).permutation(num_shards)
  return [np.sort(np.concatenate([shards[s] for s in
                                  deal[i * shards_per_client:(i + 1) * shards_per_client]]))
          for i in range(num_clients)]


def dirichlet(labels: np.ndarray, num_clients: int, alpha: float, seed: int = 0,
              min_size: int = 10, max_tries: int = 1000) -> list[np.ndarray]:
  """Label-skewed split: class c's examples go to clients in proportions ~ Dir(alpha).

  Every example is assigned exactly once (sizes sum to n). The draw is
  repeated until every client holds at least `min_size` examples (as in the
  common implementation of Hsu et al. 2019 / Wang et al. 2020, including its
  rule of giving no more of a class to a client that already holds n/N
  examples); after `max_tries` draws a DataError says to lower min_size or
  raise alpha.
  """
  labels = np.asarray(labels)
  n = len(labels)
  if alpha <= 0:
    raise DataError(f'Dirichlet alpha must be > 0, got {alpha}.')
  _check_num_clients(num_clients, n)
  if min_size * num_clients > n:
    raise DataError(f'min_size={min_size} for {num_clients} clients needs '
                    f'{min_size * num_clients} examples but there are {n}; lower min_size.')
  rng = np.random.default_rng(seed)
  classes = np.unique(labels)
  by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
  for _ in range(max_tries):
    parts: List[List[np.ndarray]] = [[] for _ in range(num_clients)]
    sizes = np.zeros(num_clients, np.int64)
    for idx in by_class:
      p = rng.dirichlet(np.full(num_clients, float(alpha)))
      p = p * (sizes < n / num_clients)
      if p.sum() == 0:  # Every client is full: fall back to the raw draw.
        p = rng.dirichlet(np.full(num_clients, float(alpha)))
      p = p / p.sum()
      cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
      for client, chunk in enumerate(np.split(idx, cuts)):
        parts[client].append(chunk)
        sizes[client] += len(chunk)
    if sizes.min() >= min_size:
      return [np.sort(np.concatenate(p)) for p in parts]
  raise DataError(f'No Dirichlet(alpha={alpha}) draw in {max_tries} tries gave every one of '
                  f'{num_clients} clients >= {min_size} examples; lower min_size or raise alpha.')


def iid(n: int, num_clients: int, seed: int = 0) -> list[np.ndarray]:
  """A random permutation of range(n) cut into `num_clients` nearly equal parts."""
  _check_num_clients(num_clients, n)
  order = np.random.default_rng(seed).permutation(n)
  return [np.sort(part) for part in np.array_split(order, num_clients)]


def _label_shards(y, num_clients, seed, labels_per_client=2, num_classes=None):
  return label_shards(y, num_clients, labels_per_client, num_classes, seed)


def _sort_and_shard(y, num_clients, seed, shards_per_client=2, num_classes=None):
  del num_classes
  return sort_and_shard(y, num_clients, shards_per_client, seed)


def _dirichlet(y, num_clients, seed, alpha=0.5, min_size=10, num_classes=None):
  del num_classes
  return dirichlet(y, num_clients, alpha, seed, min_size=min_size)


def _iid(y, num_clients, seed, num_classes=None):
  del num_classes
  return iid(len(y), num_clients, seed)


PARTITIONERS.add('label_shards', _label_shards)
PARTITIONERS.add('sort_and_shard', _sort_and_shard)
PARTITIONERS.add('dirichlet', _dirichlet)
PARTITIONERS.add('iid', _iid)


def partition_indices(y: np.ndarray, scheme: str, num_clients: int, seed: int,
                      num_classes: Optional[int] = None, **options) -> list[np.ndarray]:
  """The index arrays of scheme `scheme`; options are the scheme's own keywords."""
  fn: Callable[..., list] = PARTITIONERS.get(scheme)
  y = np.asarray(y)
  if num_classes is None:
    num_classes = int(y.max()) + 1 if y.size else 0
  try:
    return fn(y, num_clients, seed, num_classes=num_classes, **options)
  except TypeError as e:
    raise ValueError(f'Bad option(s) {sorted(options)} for partition scheme {scheme!r}: {e}. '
                     'label_shards takes labels_per_client; sort_and_shard takes '
                     'shards_per_client; dirichlet takes alpha, min_size; iid takes none.') from e


def partition(x: np.ndarray, y: np.ndarray, scheme: str, num_clients: int, seed: int,
              num_classes: Optional[int] = None, id_prefix: str = 'client',
              **options) -> Dict[str, ClientArrays]:
  """Splits (x, y) into `num_clients` clients with partitioner `scheme`.

  Args:
    x: [n, ...] examples.
    y: [n] integer labels in [0, num_classes).
    scheme: a `PARTITIONERS` name: label_shards, sort_and_shard, dirichlet, iid.
    num_clients: number of clients N.
    seed: the same seed gives the same clients.
    num_classes: defaults to max(y) + 1; labels outside [0, num_classes)
      raise DataError.
    id_prefix: client ids are f'{id_prefix}_{i:03d}' (wider for N > 1000).
    **options: the scheme's options (labels_per_client, shards_per_client,
      alpha, min_size).

  Returns:
    client id -> ClientArrays, in client order.
  """
  y = np.asarray(y)
  if len(x) != len(y):
    raise DataError(f'x has {len(x)} rows but y has {len(y)} labels.')
  if num_classes is not None and y.size and (y.min() < 0 or y.max() >= num_classes):
    raise DataError(f'Labels must be in [0, {num_classes}); found min {y.min()}, '
                    f'max {y.max()}.')
  parts = partition_indices(y, scheme, num_clients, seed, num_classes, **options)
  width = max(3, len(str(num_clients - 1)))
  return {f'{id_prefix}_{i:0{width}d}': ClientArrays(x[idx], y[idx].astype(np.int32))
          for i, idx in enumerate(parts)}
