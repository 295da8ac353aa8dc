"""The embedded default dataset: scikit-learn's bundled handwritten digits, non-IID.

scikit-learn ships the UCI "Optical Recognition of Handwritten Digits" test set
(1,797 8x8 grey images, 10 classes) inside the package, so it needs no
download. We split it into clients with the pathological label-shard scheme
(McMahan et al. 2017; FedEC Table 2): each class is sorted and cut into equal
shards and each client receives `labels_per_client` shards of distinct
classes, so every client sees only a few labels.
"""

from __future__ import annotations

import numpy as np

from tff_meta.data.types import ClientArrays, DataError, FederatedDataset


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


def load_digits(num_clients: int = 100, labels_per_client: int = 2, seed: int = 0) -> FederatedDataset:
  """Loads sklearn's digits split into `num_clients` label-shard clients."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  x = (digits.images / 16.0).astype(np.float32)   # [1797, 8, 8] in [0, 1]
  y = digits.target.astype(np.int32)
  parts = label_shards(y, num_clients, labels_per_client, 10, seed)
  clients = {f'digits_{i:03d}': ClientArrays(x[idx], y[idx]) for i, idx in enumerate(parts)}
  return FederatedDataset(
      name='digits', clients=clients, num_classes=10, element_shape=(8, 8),
      description=(f'scikit-learn digits (1,797 8x8 images), {num_clients} clients with '
                   f'{labels_per_client} labels each'))
