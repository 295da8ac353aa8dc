"""Episodic N-way tasks for few-round learning (Park et al., *Few-Round Learning for FL*).

FRL (Sec. 5 and Appendix E) meta-trains on episodes built from a class split
of a labelled dataset: the classes are divided into meta-train / validation
/ test classes (64 / 16 / 20 of CIFAR-100's 100, as for miniImageNet), and
every episode

  1. draws N classes from one part (N fixed, e.g. 5, or uniform in [3, 7]
     for the "random-way" setup), relabelled 0..N-1;
  2. samples 120 images of each class (N * 120 in all);
  3. distributes them to K = 10 clients
       IID:     every class is divided equally (12 images per class each);
       non-IID: FedAvg's sort-and-shard: the N * 120 images sorted by class
                are cut into 2K = 20 shards dealt 2 per client;
  4. gives each client one half of its images of every class as support set
     and the other half as query set (odd counts: the support set gets the
     extra image).

`sample_task` returns the K clients as `protocol.ClientSplit`s, so the
episode feeds the same round code (`program.client_data.round_data`) as the
FedMeta protocol. Randomness comes only from `seed` (an int or a sequence
such as (seed, episode)).
"""

from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import numpy as np

from tff_meta.data import partition as partition_lib
from tff_meta.data.protocol import ClientSplit
from tff_meta.data.types import ClientArrays, DataError

Seed = Union[int, Sequence[int]]


def class_split(num_classes: int, fractions: Sequence[float] = (64, 16, 20),
                seed: Seed = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Disjoint sorted arrays of meta-train / validation / test class ids.

  `fractions` are class counts when they are integers summing to
  num_classes (the default 64/16/20 is CIFAR-100's split); otherwise they are
  proportions, scaled to num_classes by rounding the cumulative sums. Every
  part must get at least one class (ValueError otherwise). Which classes go
  where is a seeded permutation.
  """
  fractions = [float(f) for f in fractions]
  if len(fractions) != 3 or min(fractions) < 0 or sum(fractions) <= 0:
    raise ValueError(f'class split needs 3 non-negative numbers, got {fractions}.')
  if all(f.is_integer() for f in fractions) and sum(fractions) == num_classes:
    bounds = np.cumsum(fractions).astype(int)
  else:
    bounds = np.round(np.cumsum(fractions) / sum(fractions) * num_classes).astype(int)
  counts = np.diff(np.concatenate([[0], bounds]))
  if counts.min() < 1:
    raise ValueError(f'class split {fractions} of {num_classes} classes gives counts '
                     f'{counts.tolist()}; every part needs at least one class.')
  order = np.random.default_rng(seed).permutation(num_classes)
  return tuple(np.sort(order[a:b]) for a, b in zip([0, *bounds[:2]], bounds))


def _num_ways(n_way: Union[int, Tuple[int, int]], rng: np.random.Generator) -> int:
  if isinstance(n_way, (tuple, list)):
    lo, hi = n_way
    if not 1 <= lo <= hi:
      raise ValueError(f'n_way range must be (low, high) with 1 <= low <= high, got {n_way}.')
    return int(rng.integers(lo, hi + 1))
  if n_way < 1:
    raise ValueError(f'n_way must be >= 1, got {n_way}.')
  return int(n_way)


def _halves(local: np.ndarray, labels: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """Per class: the first ceil(c / 2) of `local` (in order) to support, the rest to query."""
  support, query = [], []
  for c in np.unique(labels[local]):
    mine = local[labels[local] == c]
    half = (len(mine) + 1) // 2
    support.append(mine[:half])
    query.append(mine[half:])
  return np.concatenate(support), np.concatenate(query)


def sample_task(x: np.ndarray, y: np.ndarray, classes: Sequence[int],
                n_way: Union[int, Tuple[int, int]] = 5, examples_per_class: int = 120,
                num_clients: int = 10, iid: bool = True, seed: Seed = 0,
                shards_per_client: int = 2) -> List[ClientSplit]:
  """One FRL episode: `num_clients` clients with per-class support/query halves.

  Args:
    x, y: the labelled dataset (y int labels).
    classes: the class ids to draw from (one part of `class_split`).
    n_way: N, or (low, high) for N uniform in [low, high] (FRL: (3, 7)).
    examples_per_class: images sampled per class, without replacement.
    num_clients: K.
    iid: True: each class divided equally among clients; False: FedAvg's
      sort-and-shard with K * shards_per_client shards.
    seed: an int or a sequence of ints, e.g. (seed, episode).
    shards_per_client: non-IID shards per client (FRL: 2).

  Returns:
    K `ClientSplit`s ('task_client_00', ...) with labels in [0, N), the
    i-th drawn class relabelled i.
  """
  y = np.asarray(y)
  if len(x) != len(y):
    raise DataError(f'x has {len(x)} rows but y has {len(y)} labels.')
  rng = np.random.default_rng(seed)
  n = _num_ways(n_way, rng)
  classes = np.asarray(classes)
  if n > len(classes):
    raise DataError(f'{n}-way task needs {n} classes but only {len(classes)} are given.')
  if examples_per_class < num_clients:
    raise DataError(f'examples_per_class={examples_per_class} < num_clients={num_clients}: '
                    'some client would get no example of a class.')
  chosen = rng.choice(classes, size=n, replace=False)
  picked = []
  for c in chosen:
    pool = np.flatnonzero(y == c)
    if len(pool) < examples_per_class:
      raise DataError(f'class {c} has {len(pool)} examples; examples_per_class='
                      f'{examples_per_class} needs more. Lower examples_per_class.')
    picked.append(rng.choice(pool, size=examples_per_class, replace=False))
  index = np.concatenate(picked)                       # grouped by new label
  labels = np.repeat(np.arange(n, dtype=np.int32), examples_per_class)
  if iid:
    parts = [[] for _ in range(num_clients)]
    for j in range(n):
      block = np.arange(j * examples_per_class, (j + 1) * examples_per_class)
      for k, piece in enumerate(np.array_split(block, num_clients)):
        parts[k].append(piece)
    local = [np.concatenate(p) for p in parts]
  else:
    local = partition_lib.sort_and_shard(labels, num_clients, shards_per_client,
                                         seed=int(rng.integers(2**31)))
  xs = x[index]
  clients = []
  for k, mine in enumerate(local):
    support, query = _halves(mine, labels)
    clients.append(ClientSplit(f'task_client_{k:02d}',
                               ClientArrays(xs[support], labels[support]),
                               ClientArrays(xs[query], labels[query])))
  return clients
