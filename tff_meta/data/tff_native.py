"""Loaders for TFF's native sqlite datasets EMNIST, Shakespeare and CIFAR-100, offline.

Reads the files that `tff.simulation.datasets.<name>.load_data` (TFF 0.87)
keeps in its `cache_dir` (default `~/.tff`): `emnist_all.sqlite` (for both
`only_digits` values; the digits are the `digits_only_*` splits of the same
file), `shakespeare.sqlite` and `cifar100.sqlite` (each is the download
`<name>.sqlite.lzma` decompressed by TFF), through `tff_sqlite` (TFF's
`SqlClientData` schema, read in bulk in TFF's own order; a missing file is
downloaded with TFF's own download helper, or with download=False a
`DataError` naming the path). `via_tff=True` reads
through TFF's `ClientData` instead (slower). Stack Overflow is in
`stackoverflow`.

Client ids are sorted (as `SqlClientData.client_ids`); split 'all'
concatenates each client's train examples followed by its test examples (the
FedMeta protocol re-splits every client itself). CIFAR-100's train and test
clients are different partitions, so there 'all' keeps them as separate
clients.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_meta.data import lazy_clients, text, tff_sqlite
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset

EMNIST_FILE = 'emnist_all.sqlite'
SHAKESPEARE_FILE = 'shakespeare.sqlite'
CIFAR100_FILE = 'cifar100.sqlite'
_EMNIST_SPEC = {
    'pixels': tf.io.FixedLenFeature(shape=(28, 28), dtype=tf.float32),
    'label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
}
_SHAKESPEARE_SPEC = {
    'snippets': tf.io.FixedLenFeature(shape=(), dtype=tf.string),
}
# As in `tff.simulation.datasets.cifar100`: images are stored as int64.
_CIFAR100_SPEC = {
    'coarse_label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
    'image': tf.io.FixedLenFeature(shape=(32, 32, 3), dtype=tf.int64),
    'label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
}
_CIFAR100_CASTS = {'image': np.uint8, 'label': np.int32,
                   'coarse_label': np.int32}


def load_emnist(cache_dir: Optional[str] = None, only_digits: bool = False,
                split: str = 'all', max_clients: int = 0,
                via_tff: bool = False, download: bool = True,
                cache_mb: float = lazy_clients.DEFAULT_CACHE_MB) -> FederatedDataset:
  """Federated EMNIST from `<cache_dir>/emnist_all.sqlite` (TFF's file), read on demand.

  At start only the client ids, their counts and where their rows are
  (`tff_sqlite.index_clients`); a client's examples are read when it is
  used, through a cache of `cache_mb` megabytes (`lazy_clients`). The arrays
  equal a bulk read's (`tff_sqlite.read_clients`) and TFF's
  `create_tf_dataset_for_client`'s.

  Args:
    cache_dir: the folder given to `tff.simulation.datasets.emnist.load_data`;
      None means TFF's default `~/.tff`.
    only_digits: the 10-class `digits_only_*` splits instead of the 62-class
      `all_*` splits.
    split: 'train', 'test', or 'all' (train then test, per client).
    max_clients: > 0 keeps the first N client ids in sorted order.
    via_tff: read through TFF's `ClientData` (same arrays, slower).
    download: fetch a missing file with TFF's download helper (False: a
      missing file is a `DataError`; the programs' --no_download).
    cache_mb: megabytes of read clients' arrays kept (least recently used
      out first); 0 keeps only the client last read.

  Returns:
    `FederatedDataset` 'emnist': x float32 [n, 28, 28] exactly as stored
    (1.0 = background), y int32 in [0, 62) (or [0, 10)).
  """
  path = tff_sqlite.sqlite_path(cache_dir, EMNIST_FILE, download)
  prefix = 'digits_only' if only_digits else 'all'
  splits = tff_sqlite.split_names(split, f'{prefix}_train', f'{prefix}_test')
  if via_tff:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    train, test = tff.simulation.datasets.emnist.load_data(
        only_digits=only_digits, cache_dir=os.path.dirname(path))
    chosen = {'train': [train], 'test': [test], 'all': [train, test]}[split]
    per_client = tff_sqlite.read_via_tff(chosen, max_clients, ('pixels', 'label'))
    clients = {cid: _emnist_arrays(parts) for cid, parts in per_client.items()}
  else:
    index = tff_sqlite.index_clients(path, splits, max_clients)
    clients = lazy_clients.LazyClients(
        index.sizes(), lambda cid: _emnist_arrays(index.read(cid, _EMNIST_SPEC)), cache_mb,
        source=path)
  return FederatedDataset(
      name='emnist', clients=clients, num_classes=10 if only_digits else 62,
      element_shape=(28, 28),
      description=(f'TFF federated EMNIST ({prefix}, split {split}) from '
                   f'{path}; 1.0 = background'),
      source=path, x_range=(0.0, 1.0))


def _emnist_arrays(parts) -> ClientArrays:
  """One client's EMNIST arrays from its feature dicts, one per split (concatenated)."""
  x = np.concatenate([p['pixels'].reshape(-1, 28, 28) for p in parts])
  y = np.concatenate([p['label'].reshape(-1) for p in parts])
  return ClientArrays(x.astype(np.float32), y.astype(np.int32))


def load_shakespeare(cache_dir: Optional[str] = None, split: str = 'all',
                     max_clients: int = 0, seq_length: int = 80,
                     stride: int = 1, via_tff: bool = False,
                     download: bool = True) -> FederatedDataset:
  """Federated Shakespeare from `<cache_dir>/shakespeare.sqlite` (TFF's file).

  Every snippet of a speaking role becomes next-character examples with
  `text.char_windows`: windows of `seq_length` characters starting every
  `stride` characters, labelled with the following character; snippets
  shorter than seq_length + 1 are left-padded with id 0 (one example each),
  1-character and empty snippets give none. stride=1 matches LEAF's own
  preprocessing (stride 1 over the role's text) and gives ~1.63M examples
  (~0.5 GB as int32) for the full file (715 roles, splits train+test); use
  `max_clients` or a larger `stride` to keep it small.

  Args:
    cache_dir: the folder given to `tff.simulation.datasets.shakespeare
      .load_data`; None means TFF's default `~/.tff`.
    split: 'train', 'test', or 'all' (train then test, per client).
    max_clients: > 0 keeps the first N client ids in sorted order.
    seq_length: characters per example.
    stride: distance between the starts of consecutive windows.
    via_tff: read through TFF's `ClientData` (same arrays, slower).
    download: fetch a missing file with TFF's download helper (False: a
      missing file is a `DataError`; the programs' --no_download).

  Returns:
    `FederatedDataset` 'shakespeare': x int32 [n, seq_length] character ids
    (`text.ALL_LETTERS`, 1..80, 0 = pad), y int32 [n]; num_classes 81.
  """
  if seq_length < 1 or stride < 1:
    raise DataError(f'seq_length and stride must be >= 1, got {seq_length}, '
                    f'{stride}.')
  path = tff_sqlite.sqlite_path(cache_dir, SHAKESPEARE_FILE, download)
  splits = tff_sqlite.split_names(split, 'train', 'test')
  if via_tff:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    train, test = tff.simulation.datasets.shakespeare.load_data(
        cache_dir=os.path.dirname(path))
    chosen = {'train': [train], 'test': [test], 'all': [train, test]}[split]
    per_client = tff_sqlite.read_via_tff(chosen, max_clients, ('snippets',))
  else:
    per_client = tff_sqlite.read_clients(path, splits, max_clients, _SHAKESPEARE_SPEC)
  clients = {}
  for cid, parts in per_client.items():
    xs, ys = [], []
    for part in parts:
      for snippet in part['snippets']:
        ids = text.encode_chars(snippet.decode('utf-8'))
        x, y = text.char_windows(ids, seq_length, stride)
        xs.append(x)
        ys.append(y)
    if xs:
      clients[cid] = ClientArrays(np.concatenate(xs), np.concatenate(ys))
    else:
      clients[cid] = ClientArrays(np.zeros((0, seq_length), np.int32),
                                  np.zeros((0,), np.int32))
  return FederatedDataset(
      name='shakespeare', clients=clients, source=path, num_classes=text.NUM_CHAR_CLASSES,
      element_shape=(seq_length,),
      description=(f'TFF federated Shakespeare (split {split}) from {path}: '
                   f'{seq_length}-char windows, stride {stride}, next-char '
                   f'labels, LEAF character ids'))


def load_tff_cifar100(cache_dir: Optional[str] = None, split: str = 'all',
                      max_clients: int = 0,
                      label: str = 'fine', download: bool = True) -> FederatedDataset:
  """Federated CIFAR-100 from `<cache_dir>/cifar100.sqlite` (TFF's file).

  TFF's partition (Pachinko allocation over coarse then fine labels, see
  `tff.simulation.datasets.cifar100.load_data`): 500 train clients and 100
  test clients of 100 images each, with ids '0'..'499' and '0'..'99'. The
  two splits partition different images (CIFAR-100's train and test sets),
  so a train and a test client with the same id are unrelated: split 'all'
  keeps them apart, as 600 clients, the train ids as they are followed by
  the test ids prefixed 'test/'.

  Args:
    cache_dir: the folder given to `tff.simulation.datasets.cifar100
      .load_data`; None means TFF's default `~/.tff`.
    split: 'train', 'test', or 'all' (both, test ids prefixed 'test/').
    max_clients: > 0 keeps the first N clients: client ids in sorted
      (string) order, train clients before test clients for 'all'.
    label: 'fine' (100 classes, feature `label`) or 'coarse' (20
      superclasses, feature `coarse_label`).
    download: fetch a missing file with TFF's download helper (False: a
      missing file is a `DataError`; the programs' --no_download).

  Returns:
    `FederatedDataset` 'tff_cifar100': x float32 [n, 32, 32, 3] RGB, the
    stored uint8 values / 255 (in [0, 1]), y int32 in [0, 100) (or [0, 20));
    `extras['coarse_labels']` (or `extras['fine_labels']`) maps each client
    to its other label, int32 [n] in the order of y.
  """
  if label not in ('fine', 'coarse'):
    raise DataError(f"label must be 'fine' or 'coarse', got {label!r}.")
  path = tff_sqlite.sqlite_path(cache_dir, CIFAR100_FILE, download)
  splits = tff_sqlite.split_names(split, 'train', 'test')
  per_client = {}
  for name in splits:
    budget = max_clients - len(per_client) if max_clients > 0 else 0
    if max_clients > 0 and budget <= 0:
      break
    prefix = 'test/' if split == 'all' and name == 'test' else ''
    for cid, parts in tff_sqlite.read_clients(path, (name,), budget, _CIFAR100_SPEC,
                                              _CIFAR100_CASTS).items():
      per_client[prefix + cid] = parts[0]
  key, other_key = (('label', 'coarse_label') if label == 'fine' else
                    ('coarse_label', 'label'))
  clients, other = {}, {}
  for cid, part in per_client.items():
    clients[cid] = ClientArrays(
        part['image'].reshape(-1, 32, 32, 3).astype(np.float32)
        / np.float32(255), part[key].reshape(-1).astype(np.int32))
    other[cid] = part[other_key].reshape(-1).astype(np.int32)
  return FederatedDataset(
      name='tff_cifar100', clients=clients, source=path, x_range=(0.0, 1.0),
      num_classes=100 if label == 'fine' else 20, element_shape=(32, 32, 3),
      description=(f'TFF federated CIFAR-100 ({label} labels, split {split}) '
                   f'from {path}; RGB in [0, 1]'),
      extras={('coarse_labels' if label == 'fine' else 'fine_labels'): other})
