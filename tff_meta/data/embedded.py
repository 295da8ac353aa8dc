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

from tff_meta.data.partition import label_shards
from tff_meta.data.types import ClientArrays, FederatedDataset


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
      source='scikit-learn digits', x_range=(0.0, 1.0),
      description=(f'scikit-learn digits (1,797 8x8 images), {num_clients} clients with '
                   f'{labels_per_client} labels each'))
