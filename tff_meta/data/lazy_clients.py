"""Clients read on demand: a client id -> `ClientArrays` mapping with a bounded cache.

A `FederatedDataset` whose `clients` is a `LazyClients` knows every client's
id and example count from the start (what the protocol's filter and splits
need) and reads a client's examples only when they are asked for
(`clients[cid]`): when the client is sampled for a round or evaluated. Read
clients are kept in a least-recently-used cache bounded by the bytes of
their arrays (`cache_mb`); the client just read is always kept, however
large. Every read client is checked to have the count it was listed with,
and by the data check (`checks.check_dataset` sets `check`), so a client
with a non-finite feature or a bad label raises `DataError` when it is first
read; it is not cached, so every later read raises too.

Reads are serialized by a lock, so rounds built in other threads share the
cache and the reader.
"""

from __future__ import annotations

import collections
import threading
from typing import Callable, Dict, Iterator, Optional

from tff_meta.data.types import ClientArrays, DataError

DEFAULT_CACHE_MB = 256   # ~350 EMNIST writers of ~230 images (0.72 MB each)


class LazyClients(collections.abc.Mapping):
  """client id -> `ClientArrays`, read by `read(client_id)` on first use and cached (LRU).

  Attributes:
    sizes: client id -> its number of examples, known without reading it.
    source: what is read (a file path), for messages.
    check: called as check(client_id, arrays) on every read from the source (the data
      check).
  """

  def __init__(self, sizes: Dict[str, int], read: Callable[[str], ClientArrays],
               cache_mb: float = DEFAULT_CACHE_MB, source: str = ''):
    if cache_mb < 0:
      raise DataError(f'cache_mb must be >= 0 (megabytes of client arrays kept), got {cache_mb}.')
    self.sizes, self.source = sizes, source
    self.check: Optional[Callable[[str, ClientArrays], None]] = None
    self._read, self._budget = read, int(cache_mb * 2**20)
    self._cache: 'collections.OrderedDict[str, ClientArrays]' = collections.OrderedDict()
    self._held = 0
    self._lock = threading.Lock()
    self.reads = 0   # clients read from the source (cache misses), for the benchmarks

  def __getitem__(self, client_id: str) -> ClientArrays:
    with self._lock:
      arrays = self._cache.get(client_id)
      if arrays is not None:
        self._cache.move_to_end(client_id)
        return arrays
      if client_id not in self.sizes:
        raise KeyError(client_id)
      arrays = self._read(client_id)
      self.reads += 1
      if len(arrays) != self.sizes[client_id]:
        raise DataError(f'{self.source}: client {client_id!r} read {len(arrays)} examples but '
                        f'was listed with {self.sizes[client_id]}; the file changed while it '
                        'was read. Run again on an unchanged file.')
      if self.check is not None:
        self.check(client_id, arrays)
      self._cache[client_id] = arrays
      self._held += _nbytes(arrays)
      while self._held > self._budget and len(self._cache) > 1:
        _, old = self._cache.popitem(last=False)
        self._held -= _nbytes(old)
      return arrays

  def __iter__(self) -> Iterator[str]:
    return iter(self.sizes)

  def __len__(self) -> int:
    return len(self.sizes)

  def __contains__(self, client_id) -> bool:
    return client_id in self.sizes

  def drop(self, client_ids) -> int:
    """Leaves `client_ids` out (the data check's opt-in); returns how many clients are left."""
    with self._lock:
      for cid in client_ids:
        self.sizes.pop(cid, None)
        old = self._cache.pop(cid, None)
        if old is not None:
          self._held -= _nbytes(old)
    return len(self.sizes)

  @property
  def cached_bytes(self) -> int:
    return self._held


def _nbytes(arrays: ClientArrays) -> int:
  return arrays.x.nbytes + arrays.y.nbytes
