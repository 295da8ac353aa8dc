"""Reading TFF's SqlClientData files (TFF 0.87's `tff.simulation.datasets` downloads).

The files hold table `examples(split_name, client_id,
serialized_example_proto)` of serialized `tf.train.Example`s and table
`client_metadata(client_id, split_name, num_examples)`. `sqlite_path` finds
the file in the cache folder; a missing file is fetched with TFF's own download
helper (`download`, the one TFF's loaders call) into a staging folder and moved
into place whole, so a failed download (offline, say) leaves no partial file
and raises `DataError` naming the URL and the folder to copy the file into.
With `download=False` (the programs' --no_download) a missing file raises
`DataError` naming the path to place, and nothing is fetched.

`RowIndex` reads on demand: at start only the client ids, their counts and
their rowid runs (`index_clients`, no example blob is parsed), then one
client's rows by rowid range when asked (`RowIndex.read`), in the same rowid
order and through the same parser as `read_clients`, so the arrays are equal.

`read_clients` reads in bulk: one sqlite query per split (per chunk of client
ids when `max_clients` keeps a subset) and `tf.io.parse_example` over all
rows, in the sqlite scan (rowid) order that TFF's per-client `SqlDataset`
query uses, so every client's arrays are identical to iterating
`ClientData.create_tf_dataset_for_client`, which `read_via_tff` does (slower;
checked by the tests). Client ids are sorted (as `SqlClientData.client_ids`).
The loaders are in `tff_native` (EMNIST, Shakespeare, CIFAR-100) and
`stackoverflow`.
"""

from __future__ import annotations

import collections
import http.client
import lzma
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tff_meta.data.types import DataError

SPLITS = ('train', 'test', 'all')
_PARSE_CHUNK = 10000  # rows per tf.io.parse_example call
_IDS_PER_QUERY = 500  # client ids per `IN (...)` query (sqlite variable limit)


def cache_folder(cache_dir: Optional[str]) -> str:
  """The folder TFF's loaders use: `cache_dir`, or TFF's default `~/.tff`."""
  return cache_dir if cache_dir is not None else os.path.join(os.path.expanduser('~'), '.tff')


# Where TFF 0.87's loaders download each file (`<file>.lzma`, decompressed by TFF's download
# helper); tests/data/test_tff_download.py checks these against the loaders' source.
TFF_DATASETS_URL = 'https://storage.googleapis.com/tff-datasets-public/'
DOWNLOADABLE = ('emnist_all.sqlite', 'shakespeare.sqlite', 'cifar100.sqlite',
                'stackoverflow.sqlite')
DOWNLOAD_TIMEOUT_S = 60.0   # a stalled connection fails instead of hanging


def download_url(filename: str) -> str:
  return f'{TFF_DATASETS_URL}{filename}.lzma'


def sqlite_path(cache_dir: Optional[str], filename: str, download: bool = True) -> str:
  """The file TFF's loader reads; a missing one is downloaded (`fetch`) unless download=False."""
  folder = cache_folder(cache_dir)
  path = os.path.join(folder, filename)
  if os.path.isfile(path):
    return path
  if download and filename in DOWNLOADABLE:
    return fetch(folder, filename)
  raise DataError(
      f'TFF dataset file not found: {path!r} (downloading is off; folder {folder!r} '
      f'{"exists" if os.path.isdir(folder) else "does not exist"}). Either '
      f'run tff.simulation.datasets once on a machine with internet using '
      f'cache_dir={folder!r}, which downloads and decompresses it there, or '
      f'copy an existing {filename} into that folder.')


def fetch(folder: str, filename: str) -> str:
  """Downloads `filename` into `folder` with TFF's download helper; returns its path.

  TFF's helper writes the decompressed file as it downloads, so it writes into a
  staging folder inside `folder`, and the finished file is renamed into place.
  Any failure removes the staging folder and the folders this call created.
  """
  # TFF's own download helper, the one its loaders call (imported here: TFF loads slowly).
  from tensorflow_federated.python.simulation.datasets import download  # pylint: disable=g-import-not-at-top
  url, path = download_url(filename), os.path.join(folder, filename)
  created = _missing_folders(folder)
  staging, done = None, False
  print(f'note: {path} is missing; downloading {url} with TFF\'s download helper (decompressed '
        f'as it arrives; the first run of a dataset takes minutes). --no_download, or [data] '
        f'download = false in a config, turns this off.',
        file=sys.stderr, flush=True)
  timeout = socket.getdefaulttimeout()
  try:
    os.makedirs(folder, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f'.{filename}.download-', dir=folder)
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    fetched = download.get_compressed_file(origin=url, cache_dir=staging)
    connect(fetched).close()   # a whole sqlite file with TFF's tables, else DataError
    os.replace(fetched, path)
    done = True
  except (OSError, EOFError, lzma.LZMAError, http.client.HTTPException, ValueError,
          tf.errors.OpError, DataError) as e:
    reason = getattr(e, 'reason', None) or getattr(e, 'message', None) or e
    raise DataError(
        f'could not download {url} into {folder!r} ({type(e).__name__}: {reason}). Copy '
        f'{filename} (TFF\'s loaders keep it in ~/.tff after a download on a machine with '
        f'internet) to {path!r}, or check the connection and run again.') from None
  finally:
    socket.setdefaulttimeout(timeout)
    if staging is not None:
      shutil.rmtree(staging, ignore_errors=True)
    if not done:
      for made in created:   # deepest first; only empty folders go
        try:
          os.rmdir(made)
        except OSError:
          break
  return path


def _missing_folders(folder: str) -> List[str]:
  """`folder` and its missing parents, deepest first: what `os.makedirs` would create."""
  missing, current = [], os.path.abspath(folder)
  while not os.path.isdir(current) and os.path.dirname(current) != current:
    missing.append(current)
    current = os.path.dirname(current)
  return missing


def split_names(split: str, train: str, test: str) -> Tuple[str, ...]:
  """The file's split names of 'train', 'test' or 'all' (train then test)."""
  if split not in SPLITS:
    raise DataError(f'split must be one of {SPLITS}, got {split!r}.')
  return {'train': (train,), 'test': (test,), 'all': (train, test)}[split]


def connect(path: str, shared: bool = False) -> sqlite3.Connection:
  """A read-only connection to a SqlClientData file, checked to have its two tables.

  shared=True lets other threads use it (the caller serializes the calls)."""
  try:
    conn = sqlite3.connect(f'file:{path}?mode=ro', uri=True, check_same_thread=not shared)
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


def sorted_client_ids(conn: sqlite3.Connection, path: str, splits: Sequence[str],
                      max_clients: int) -> List[str]:
  """The sorted client ids of `splits` (the first `max_clients` when > 0)."""
  marks = ','.join('?' * len(splits))
  ids = sorted(r[0] for r in conn.execute(
      f'SELECT DISTINCT client_id FROM client_metadata '
      f'WHERE split_name IN ({marks})', tuple(splits)))
  if not ids:
    raise DataError(f'{path!r} has no clients in splits {list(splits)}.')
  return ids[:max_clients] if max_clients > 0 else ids


def parse_rows(blobs: Sequence[bytes], spec,
                casts: Optional[Dict[str, type]]) -> Dict[str, np.ndarray]:
  """Parsed features of serialized examples, in chunks; `casts` narrows dtypes."""
  casts = casts or {}
  chunks = collections.defaultdict(list)
  for start in range(0, len(blobs), _PARSE_CHUNK):
    parsed = tf.io.parse_example(
        tf.constant(blobs[start:start + _PARSE_CHUNK]), spec)
    for k, v in parsed.items():
      chunks[k].append(v.numpy().astype(casts.get(k, v.dtype.as_numpy_dtype),
                                        copy=False))
  return {k: (np.concatenate(chunks[k]) if chunks[k] else
              np.zeros((0,) + tuple(s.shape),
                       casts.get(k, s.dtype.as_numpy_dtype)))
          for k, s in spec.items()}


def read_split(conn: sqlite3.Connection, split: str,
               client_ids: Sequence[str], spec, subset: bool = False,
               casts: Optional[Dict[str, type]] = None,
               ) -> Dict[str, Dict[str, np.ndarray]]:
  """client id -> parsed features of its rows in one split, in rowid order.

  subset=True selects the clients in SQL (chunks of ids, each query in rowid
  order, so every client's rows keep rowid order) instead of scanning the
  whole split: much faster when `max_clients` keeps few of many clients.
  """
  wanted = set(client_ids)
  if subset:
    rows = []
    for start in range(0, len(client_ids), _IDS_PER_QUERY):
      chunk = tuple(client_ids[start:start + _IDS_PER_QUERY])
      rows.extend(conn.execute(
          'SELECT client_id, serialized_example_proto FROM examples '
          f'WHERE split_name = ? AND client_id IN ({",".join("?" * len(chunk))})'
          ' ORDER BY rowid', (split,) + chunk))
  else:
    rows = [r for r in conn.execute(
        'SELECT client_id, serialized_example_proto FROM examples '
        'WHERE split_name = ? ORDER BY rowid', (split,)) if r[0] in wanted]
  features = parse_rows([r[1] for r in rows], spec, casts)
  positions = collections.defaultdict(list)
  for i, (cid, _) in enumerate(rows):
    positions[cid].append(i)
  return {cid: {k: v[np.asarray(positions[cid], dtype=np.int64)]
                for k, v in features.items()} for cid in client_ids}


def read_clients(path: str, splits: Sequence[str], max_clients: int, spec,
                 casts: Optional[Dict[str, type]] = None,
                 ) -> Dict[str, List[Dict[str, np.ndarray]]]:
  """client id -> one feature dict per split (in `splits` order)."""
  conn = connect(path)
  try:
    ids = sorted_client_ids(conn, path, splits, max_clients)
    per_split = [read_split(conn, split, ids, spec, max_clients > 0, casts)
                 for split in splits]
  finally:
    conn.close()
  return {cid: [features[cid] for features in per_split] for cid in ids}


class RowIndex:
  """Where each client's rows of each split are in a SqlClientData file, and their reader.

  TFF's `examples` table has no index on client_id, so a per-client query
  would scan the table. One grouped scan per split (`index_clients`; the
  rowid, split and client columns only) finds each client's first and last
  rowid and count. Where no other client's rows of the split fall between a
  client's first and last rowid (TFF's files: every client's rows are
  together, its splits interleaved), the client is read with `WHERE rowid
  BETWEEN ? AND ? AND split_name = ?`, a range of the table's B-tree. A
  client whose range overlaps another's keeps its explicit rowid array. Per
  client and split this holds 20 bytes (first, last, count) in arrays aligned
  with `ids`.
  """

  def __init__(self, path: str, conn: sqlite3.Connection, splits: Sequence[str],
               ids: List[str], first: np.ndarray, last: np.ndarray, counts: np.ndarray,
               scattered: Dict[Tuple[int, str], np.ndarray]):
    self.path, self.splits, self.ids = path, tuple(splits), ids
    self.position = {cid: i for i, cid in enumerate(ids)}
    self._conn, self._first, self._last = conn, first, last
    self.counts, self._scattered = counts, scattered   # counts: int32 [len(splits), len(ids)]

  def sizes(self) -> Dict[str, int]:
    """client id -> its examples over all splits."""
    return dict(zip(self.ids, self.counts.sum(axis=0).tolist()))

  @property
  def num_scattered(self) -> int:
    """(client, split) pairs read by explicit rowids (their ranges overlap another client's)."""
    return len(self._scattered)

  def read(self, client_id: str, spec, casts: Optional[Dict[str, type]] = None,
           ) -> List[Dict[str, np.ndarray]]:
    """One feature dict per split (in `splits` order) of `client_id`, rows in rowid order."""
    i = self.position[client_id]
    parts = []
    for s, split in enumerate(self.splits):
      rowids = self._scattered.get((s, client_id))
      if rowids is not None:
        blobs = []
        for start in range(0, len(rowids), _IDS_PER_QUERY):
          chunk = tuple(int(r) for r in rowids[start:start + _IDS_PER_QUERY])
          blobs.extend(r[0] for r in self._conn.execute(
              'SELECT serialized_example_proto FROM examples WHERE rowid IN '
              f'({",".join("?" * len(chunk))}) ORDER BY rowid', chunk))
      elif self.counts[s, i]:
        blobs = [r[0] for r in self._conn.execute(
            'SELECT serialized_example_proto FROM examples WHERE rowid BETWEEN ? AND ? '
            'AND split_name = ? ORDER BY rowid',
            (int(self._first[s, i]), int(self._last[s, i]), split))]
      else:
        blobs = []
      if len(blobs) != self.counts[s, i]:
        raise DataError(f'{self.path!r}: client {client_id!r} has {len(blobs)} rows in split '
                        f'{split!r} where the start-up index counted {self.counts[s, i]}; the '
                        'file changed while it was read. Run again on an unchanged file.')
      parts.append(parse_rows(blobs, spec, casts))
    return parts

  def close(self) -> None:
    self._conn.close()


def _overlapping(first: np.ndarray, last: np.ndarray) -> np.ndarray:
  """Which of the rowid ranges [first, last] overlap another range."""
  order = np.argsort(first, kind='stable')
  lo, hi = first[order], last[order]
  reach = np.maximum.accumulate(hi)   # the furthest rowid of the ranges starting earlier
  before = np.concatenate([[False], lo[1:] <= reach[:-1]])
  after = np.concatenate([hi[:-1] >= lo[1:], [False]])
  out = np.empty(len(first), bool)
  out[order] = before | after
  return out


def index_clients(path: str, splits: Sequence[str], max_clients: int) -> RowIndex:
  """The `RowIndex` of `splits` of the file (sorted ids, the first `max_clients` when > 0).

  Each client's row count per split is checked against `client_metadata`; a
  mismatch raises `DataError` naming the client.
  """
  conn = connect(path, shared=True)
  try:
    ids = sorted_client_ids(conn, path, splits, max_clients)
    position = {cid: i for i, cid in enumerate(ids)}
    shape = (len(splits), len(ids))
    first, last = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    counts, expected = np.zeros(shape, np.int32), np.zeros(shape, np.int64)
    scattered = {}
    for s, split in enumerate(splits):
      for cid, n in conn.execute('SELECT client_id, num_examples FROM client_metadata '
                                 'WHERE split_name = ?', (split,)):
        if cid in position:
          expected[s, position[cid]] = n
      others = []   # (first, last) of the split's clients not kept (max_clients)
      for cid, lo, hi, n in conn.execute(
          'SELECT client_id, MIN(rowid), MAX(rowid), COUNT(*) FROM examples '
          'WHERE split_name = ? GROUP BY client_id', (split,)):
        i = position.get(cid)
        if i is None:
          others.append((lo, hi))
        else:
          first[s, i], last[s, i], counts[s, i] = lo, hi, n
      kept = np.flatnonzero(counts[s] > 0)
      extra = np.asarray(others, np.int64).reshape(-1, 2)
      overlap = _overlapping(np.concatenate([first[s, kept], extra[:, 0]]),
                             np.concatenate([last[s, kept], extra[:, 1]]))[:len(kept)]
      wanted = {ids[i] for i in kept[overlap]}
      if wanted:   # one scan of the split for the clients whose ranges overlap another's
        rows = collections.defaultdict(list)
        for rowid, cid in conn.execute('SELECT rowid, client_id FROM examples '
                                       'WHERE split_name = ? ORDER BY rowid', (split,)):
          if cid in wanted:
            rows[cid].append(rowid)
        scattered.update({(s, cid): np.asarray(r, np.int64) for cid, r in rows.items()})
    bad = np.argwhere(counts != expected)
    if len(bad):
      s, i = bad[0]
      raise DataError(
          f'{path!r}: client {ids[i]!r} has {counts[s, i]} rows in split {splits[s]!r} but '
          f'client_metadata says {expected[s, i]} ({len(bad)} such mismatches); the file is '
          'damaged or not TFF\'s: re-download it with tff.simulation.datasets.')
  except BaseException:
    conn.close()
    raise
  return RowIndex(path, conn, splits, ids, first, last, counts, scattered)


def read_via_tff(
    client_datas, max_clients: int,
    keys: Sequence[str]) -> Dict[str, List[Dict[str, np.ndarray]]]:
  """Same as `read_clients`, through `ClientData.create_tf_dataset_for_client`."""
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
