"""Loaders for TFF's native sqlite datasets (EMNIST, Shakespeare), offline.

Reads the files that `tff.simulation.datasets.emnist.load_data` and
`tff.simulation.datasets.shakespeare.load_data` (TFF 0.87) keep in their
`cache_dir`: `emnist_all.sqlite` (for both `only_digits` values; the digits
are the `digits_only_*` splits of the same file) and `shakespeare.sqlite`.
Both hold TFF's `SqlClientData` schema: table `examples(split_name,
client_id, serialized_example_proto)` of serialized `tf.train.Example`s and
table `client_metadata(client_id, split_name, num_examples)`.

The file is checked first, so a missing file raises `DataError` naming the
path to place instead of letting TFF try a download (which fails offline).

By default the examples are read in bulk: one sqlite query per split and one
`tf.io.parse_example` call over all rows, in the sqlite scan (rowid) order
that TFF's per-client `SqlDataset` query uses, so every client's arrays are
identical to iterating `ClientData.create_tf_dataset_for_client` (checked by
the tests). `via_tff=True` reads through TFF's `ClientData` instead (slower).

Client ids are sorted (as `SqlClientData.client_ids`); split 'all'
concatenates each client's train examples followed by its test examples (the
FedMeta protocol re-splits every client itself).
"""

from __future__ import annotations

import collections
import os
import sqlite3
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tff_meta.data import text
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset

EMNIST_FILE = 'emnist_all.sqlite'
SHAKESPEARE_FILE = 'shakespeare.sqlite'
_EMNIST_SPEC = {
    'pixels': tf.io.FixedLenFeature(shape=(28, 28), dtype=tf.float32),
    'label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
}
_SHAKESPEARE_SPEC = {
    'snippets': tf.io.FixedLenFeature(shape=(), dtype=tf.string),
}
_SPLITS = ('train', 'test', 'all')


def sqlite_path(cache_dir: Optional[str], filename: str) -> str:
  """The file TFF's loader reads, checked to exist (no download is tried)."""
  folder = (cache_dir if cache_dir is not None else
            os.path.join(os.path.expanduser('~'), '.tff'))
  path = os.path.join(folder, filename)
  if not os.path.isfile(path):
    raise DataError(
        f'TFF dataset file not found: {path!r} (folder {folder!r} '
        f'{"exists" if os.path.isdir(folder) else "does not exist"}). Either '
        f'run tff.simulation.datasets once on a machine with internet using '
        f'cache_dir={folder!r}, which downloads and decompresses it there, or '
        f'copy an existing {filename} into that folder.')
  return path


def _split_names(split: str, train: str, test: str) -> Tuple[str, ...]:
  if split not in _SPLITS:
    raise DataError(f'split must be one of {_SPLITS}, got {split!r}.')
  return {'train': (train,), 'test': (test,), 'all': (train, test)}[split]


def _connect(path: str) -> sqlite3.Connection:
  try:
    conn = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
    tables = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
  except sqlite3.DatabaseError as e:
    raise DataError(f'{path!r} is not a readable sqlite file ({e}); '
                    're-download it with tff.simulation.datasets.') from e
  if not {'examples', 'client_metadata'} <= tables:
    raise DataError(
        f'{path!r} lacks the tables `examples` and `client_metadata` of '
        f"TFF's SqlClientData format (has {sorted(tables)}); re-download it.")
  return conn


def _client_ids(conn: sqlite3.Connection, path: str, splits: Sequence[str],
                max_clients: int) -> List[str]:
  marks = ','.join('?' * len(splits))
  ids = sorted(r[0] for r in conn.execute(
      f'SELECT DISTINCT client_id FROM client_metadata '
      f'WHERE split_name IN ({marks})', tuple(splits)))
  if not ids:
    raise DataError(f'{path!r} has no clients in splits {list(splits)}.')
  return ids[:max_clients] if max_clients > 0 else ids


def _read_split_bulk(conn: sqlite3.Connection, split: str,
                     client_ids: Sequence[str],
                     spec) -> Dict[str, Dict[str, np.ndarray]]:
  """client id -> parsed features of its rows in one split, in rowid order."""
  wanted = set(client_ids)
  rows = [r for r in conn.execute(
      'SELECT client_id, serialized_example_proto FROM examples '
      'WHERE split_name = ? ORDER BY rowid', (split,)) if r[0] in wanted]
  if rows:
    parsed = tf.io.parse_example(tf.constant([r[1] for r in rows]), spec)
    features = {k: v.numpy() for k, v in parsed.items()}
  else:
    features = {k: np.zeros((0,) + tuple(s.shape), s.dtype.as_numpy_dtype)
                for k, s in spec.items()}
  positions = collections.defaultdict(list)
  for i, (cid, _) in enumerate(rows):
    positions[cid].append(i)
  return {cid: {k: v[np.asarray(positions[cid], dtype=np.int64)]
                for k, v in features.items()} for cid in client_ids}


def _read_bulk(path: str, splits: Sequence[str], max_clients: int,
               spec) -> Dict[str, List[Dict[str, np.ndarray]]]:
  """client id -> one feature dict per split (in `splits` order)."""
  conn = _connect(path)
  try:
    ids = _client_ids(conn, path, splits, max_clients)
    per_split = [_read_split_bulk(conn, split, ids, spec) for split in splits]
  finally:
    conn.close()
  return {cid: [features[cid] for features in per_split] for cid in ids}


def _read_via_tff(
    client_datas, max_clients: int,
    keys: Sequence[str]) -> Dict[str, List[Dict[str, np.ndarray]]]:
  """Same as `_read_bulk`, through `ClientData.create_tf_dataset_for_client`."""
  ids = sorted(set().union(*(cd.client_ids for cd in client_datas)))
  ids = ids[:max_clients] if max_clients > 0 else ids
  out = {}
  for cid in ids:
    parts = []
    for cd in client_datas:
      if cid in cd.client_ids:
        rows = list(cd.create_tf_dataset_for_client(cid).as_numpy_iterator())
      else:
        rows = []
      parts.append({k: np.array([r[k] for r in rows]) for k in keys})
    out[cid] = parts
  return out


def load_emnist(cache_dir: Optional[str] = None, only_digits: bool = False,
                split: str = 'all', max_clients: int = 0,
                via_tff: bool = False) -> FederatedDataset:
  """Federated EMNIST from `<cache_dir>/emnist_all.sqlite` (TFF's file).

  Args:
    cache_dir: the folder given to `tff.simulation.datasets.emnist.load_data`;
      None means TFF's default `~/.tff`.
    only_digits: the 10-class `digits_only_*` splits instead of the 62-class
      `all_*` splits.
    split: 'train', 'test', or 'all' (train then test, per client).
    max_clients: > 0 keeps the first N client ids in sorted order.
    via_tff: read through TFF's `ClientData` (same arrays, slower).

  Returns:
    `FederatedDataset` 'emnist': x float32 [n, 28, 28] exactly as stored
    (1.0 = background), y int32 in [0, 62) (or [0, 10)).
  """
  path = sqlite_path(cache_dir, EMNIST_FILE)
  prefix = 'digits_only' if only_digits else 'all'
  splits = _split_names(split, f'{prefix}_train', f'{prefix}_test')
  if via_tff:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    train, test = tff.simulation.datasets.emnist.load_data(
        only_digits=only_digits, cache_dir=os.path.dirname(path))
    chosen = {'train': [train], 'test': [test], 'all': [train, test]}[split]
    per_client = _read_via_tff(chosen, max_clients, ('pixels', 'label'))
  else:
    per_client = _read_bulk(path, splits, max_clients, _EMNIST_SPEC)
  clients = {}
  for cid, parts in per_client.items():
    x = np.concatenate([p['pixels'].reshape(-1, 28, 28) for p in parts])
    y = np.concatenate([p['label'].reshape(-1) for p in parts])
    clients[cid] = ClientArrays(x.astype(np.float32), y.astype(np.int32))
  return FederatedDataset(
      name='emnist', clients=clients, num_classes=10 if only_digits else 62,
      element_shape=(28, 28),
      description=(f'TFF federated EMNIST ({prefix}, split {split}) from '
                   f'{path}; 1.0 = background'))


def load_shakespeare(cache_dir: Optional[str] = None, split: str = 'all',
                     max_clients: int = 0, seq_length: int = 80,
                     stride: int = 1,
                     via_tff: bool = False) -> FederatedDataset:
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

  Returns:
    `FederatedDataset` 'shakespeare': x int32 [n, seq_length] character ids
    (`text.ALL_LETTERS`, 1..80, 0 = pad), y int32 [n]; num_classes 81.
  """
  if seq_length < 1 or stride < 1:
    raise DataError(f'seq_length and stride must be >= 1, got {seq_length}, '
                    f'{stride}.')
  path = sqlite_path(cache_dir, SHAKESPEARE_FILE)
  splits = _split_names(split, 'train', 'test')
  if via_tff:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    train, test = tff.simulation.datasets.shakespeare.load_data(
        cache_dir=os.path.dirname(path))
    chosen = {'train': [train], 'test': [test], 'all': [train, test]}[split]
    per_client = _read_via_tff(chosen, max_clients, ('snippets',))
  else:
    per_client = _read_bulk(path, splits, max_clients, _SHAKESPEARE_SPEC)
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
      name='shakespeare', clients=clients, num_classes=text.NUM_CHAR_CLASSES,
      element_shape=(seq_length,),
      description=(f'TFF federated Shakespeare (split {split}) from {path}: '
                   f'{seq_length}-char windows, stride {stride}, next-char '
                   f'labels, LEAF character ids'))
