"""A federated dataset pooled and re-split by a partitioner (FedEC's FEMNIST setting).

FedEC (Lan et al., Sec. 4.2.2, Table 2) and FedRep split FEMNIST like CIFAR:
each of N clients gets k classes in equal label shards, "(150, 3)". This
loader reads a federated source (TFF's EMNIST sqlite by default, the digits
only, 10 classes as in FedEC Table 1), pools every writer's examples and deals
them out with `partition.partition`.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from tff_meta.data import leaf, tff_native
from tff_meta.data import partition as partition_lib
from tff_meta.data.types import DataError, FederatedDataset


def load_repartitioned(source: str = 'emnist', partition: str = 'label_shards',
                       num_clients: int = 150, labels_per_client: int = 3,
                       shards_per_client: int = 2, alpha: float = 0.5, min_size: int = 10,
                       seed: int = 0, cache_dir: Optional[str] = None,
                       only_digits: bool = True, max_examples: int = 0,
                       invert: bool = True, download: bool = True) -> FederatedDataset:
  """`source` pooled, then split into `num_clients` clients by `partition`.

  Args:
    source: 'emnist' (TFF sqlite in `cache_dir`; `only_digits`) or
      'leaf_femnist' (LEAF JSON folder in `cache_dir`).
    partition, num_clients, labels_per_client, shards_per_client, alpha,
      min_size, seed: as in `images.load_image_dataset`.
    max_examples: > 0 keeps the first N pooled examples (writer order).
    invert: store 1 - x, ink = 1 on a 0 background as in MNIST. The FEMNIST
      files hold 1.0 = background; an MLP on those near-constant inputs with
      SGD does not even fit one client's 80 images in 20 epochs (plain Keras,
      loss stays at ln 3), while inverted it reaches 99% (docs/RESULTS.md).
    download: source 'emnist' only: fetch a missing file (`tff_native.load_emnist`).
  """
  if source == 'emnist':
    pooled = tff_native.load_emnist(cache_dir=cache_dir, only_digits=only_digits,
                                    download=download)
  elif source == 'leaf_femnist':
    if not cache_dir:
      raise DataError('Re-partitioning leaf_femnist needs cache_dir = the LEAF femnist folder.')
    pooled = leaf.load_leaf(cache_dir, task='femnist')
  else:
    raise DataError(f"Cannot re-partition {source!r}; use one of ['emnist', 'leaf_femnist'].")
  x = np.concatenate([a.x for a in pooled.clients.values()])
  y = np.concatenate([a.y for a in pooled.clients.values()])
  if max_examples > 0:
    x, y = x[:max_examples], y[:max_examples]
  if invert:
    x = 1.0 - x
  scheme_options = {'label_shards': {'labels_per_client': labels_per_client},
                    'sort_and_shard': {'shards_per_client': shards_per_client},
                    'dirichlet': {'alpha': alpha, 'min_size': min_size}}.get(partition, {})
  clients = partition_lib.partition(x, y, partition, num_clients, seed,
                                    num_classes=pooled.num_classes, id_prefix=source,
                                    **scheme_options)
  detail = ', '.join(f'{k}={v}' for k, v in scheme_options.items())
  return FederatedDataset(
      name=f'{source}_pooled', clients=clients, num_classes=pooled.num_classes,
      element_shape=pooled.element_shape, source=pooled.source, x_range=pooled.x_range,
      description=(f'{pooled.description}; {len(y)} examples pooled'
                   + (', inverted (1.0 = ink)' if invert else '') + f' and split into '
                   f'{num_clients} clients by {partition}' + (f' ({detail})' if detail else '')))
