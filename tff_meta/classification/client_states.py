"""Per-client state for simulation: keyed by client id, bounded in memory, checkpointed.

Algorithms with client state (`tff_meta.algorithms.stateful`) take each
sampled client's state as a CLIENTS-placed value and return it updated. This
store keeps those values between the rounds a client takes part in:

- a client's state is created from the process's `initial_client_state` the
  first time it is asked for (its `visits` is 0);
- states live in an in-memory cache of at most `cache_mb` megabytes; older
  entries are written to disk and read back when needed, so thousands of
  clients with model-sized states fit;
- every write is a new file version named by the round that produced it
  (`<dir>/<client hash>/<round>.npz`, written atomically). `flush(round)` at a
  checkpoint writes every state changed since (and the id index `ids.txt`,
  also atomically); `restore(round)` on resume deletes versions newer than
  the checkpoint, so each client gets back exactly the state it had at that
  round, and `prune(round)` drops versions no kept checkpoint can need;
- a state file that cannot be read, or does not fit this algorithm's state,
  raises `ClientStateError` naming the file and the fix.

On real devices this state is what a device keeps on its own storage between
rounds (e.g. an app's private files): the device loads it when it is selected,
the client computation returns the new value, and the device saves it; the
server never sees it. `docs/ARCHITECTURE.md` ("The round") has more.
"""

from __future__ import annotations

import collections
import hashlib
import os
import random
from typing import Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tff_meta.core import files


class ClientStateError(RuntimeError):
  """A damaged or foreign client-state file; the message names it and the fix."""


def _key(client_id: str) -> str:
  return hashlib.sha1(str(client_id).encode()).hexdigest()[:20]


class ClientStateStore:
  """Client id -> state (a nested structure of numpy arrays); see module docstring."""

  def __init__(self, directory: str, initial_state, cache_mb: float = 512.0):
    self._dir = directory
    self._initial = tf.nest.map_structure(lambda v: np.asarray(v, np.float32), initial_state)
    self._bytes_each = sum(a.nbytes for a in tf.nest.flatten(self._initial))
    self._capacity = max(1, int(cache_mb * 1e6 // max(self._bytes_each, 1)))
    # id -> (state, round it was produced, dirty)
    self._cache: 'collections.OrderedDict[str, Tuple[object, int, bool]]' = collections.OrderedDict()
    self._known: Dict[str, None] = {}   # ids with a state (visited at least once)
    os.makedirs(directory, exist_ok=True)
    self._scan()

  @property
  def initial_state(self):
    return self._initial

  @property
  def num_clients(self) -> int:
    """Clients that have a stored state."""
    return len(self._known)

  def _client_dir(self, client_id: str) -> str:
    return os.path.join(self._dir, _key(client_id))

  def _scan(self) -> None:
    index = os.path.join(self._dir, 'ids.txt')
    if os.path.exists(index):
      with open(index) as f:
        for line in f:
          cid = line.rstrip('\n')
          if cid and os.path.isdir(self._client_dir(cid)):
            self._known[cid] = None

  def _versions(self, client_id: str) -> List[int]:
    d = self._client_dir(client_id)
    if not os.path.isdir(d):
      return []
    return sorted(int(n[:-4]) for n in os.listdir(d) if n.endswith('.npz') and n[:-4].isdigit())

  def _write(self, client_id: str, state, round_num: int) -> None:
    d = self._client_dir(client_id)
    os.makedirs(d, exist_ok=True)
    with files.atomic_open(os.path.join(d, f'{round_num:09d}.npz'), 'wb') as f:
      np.savez(f, *tf.nest.flatten(state))

  def _write_index(self) -> None:
    files.write_text(os.path.join(self._dir, 'ids.txt'), ''.join(f'{c}\n' for c in self._known))

  def _read(self, client_id: str):
    versions = self._versions(client_id)
    if not versions:
      return None
    path = os.path.join(self._client_dir(client_id), f'{versions[-1]:09d}.npz')
    want = [(a.shape, a.dtype) for a in tf.nest.flatten(self._initial)]
    arrays = self._load(path, lambda f: [f[f'arr_{i}'] for i in range(len(f.files))])
    if [(a.shape, a.dtype) for a in arrays] != want:
      raise self._foreign(path, f'{len(arrays)} arrays, expected {len(want)} of shapes '
                                f'{[s for s, _ in want][:4]}')
    return tf.nest.pack_sequence_as(self._initial, arrays)

  def _load(self, path: str, read):
    """`read(npz)` of the state file `path`; a file that cannot be read is a ClientStateError."""
    try:
      with np.load(path, allow_pickle=False) as f:
        return read(f)
    except PermissionError:   # the machine's refusal, not damage: cli.guard names it
      raise
    except Exception as e:  # pylint: disable=broad-except  # zip/npy readers raise many types
      raise ClientStateError(
          f'Client state {path} cannot be read ({type(e).__name__}: {e}); the run\'s client '
          f'states are damaged: use a new --output_dir, or delete {self._dir} and the '
          'checkpoints folder beside it to start over.') from None

  def _foreign(self, path: str, detail: str) -> ClientStateError:
    return ClientStateError(
        f'Client state {path} does not fit this algorithm\'s client state ({detail}); it was '
        f'written by another run: use a new --output_dir, or delete {self._dir} and the '
        'checkpoints folder beside it to start over.')

  def verify(self) -> None:
    """Opens every client's latest state file (its zip index, not its arrays), so a damaged
    or foreign one stops a resumed run before it writes anything."""
    want = len(tf.nest.flatten(self._initial))
    for cid in self._known:
      versions = self._versions(cid)
      if versions:
        path = os.path.join(self._client_dir(cid), f'{versions[-1]:09d}.npz')
        count = self._load(path, lambda f: len(f.files))
        if count != want:
          raise self._foreign(path, f'{count} arrays, expected {want}')

  def _evict(self) -> None:
    while len(self._cache) > self._capacity:
      cid, (state, round_num, dirty) = self._cache.popitem(last=False)
      if dirty:
        self._write(cid, state, round_num)

  def get(self, client_ids: Sequence[str]) -> List:
    """The states of `client_ids` (a new client gets the initial state)."""
    out = []
    for cid in client_ids:
      if cid in self._cache:
        self._cache.move_to_end(cid)
        out.append(self._cache[cid][0])
        continue
      state = self._read(cid) if cid in self._known else None
      if state is None:
        out.append(self._initial)
        continue
      self._cache[cid] = (state, -1, False)
      self._evict()
      out.append(state)
    return out

  def put(self, client_ids: Sequence[str], states: Sequence, round_num: int) -> None:
    """Stores the states the round `round_num` returned for `client_ids`."""
    if len(client_ids) != len(states):
      raise ValueError(f'{len(client_ids)} client ids but {len(states)} states.')
    for cid, state in zip(client_ids, states):
      state = tf.nest.map_structure(lambda v: np.asarray(v, np.float32), state)
      self._cache[cid] = (state, round_num, True)
      self._cache.move_to_end(cid)
      self._known[cid] = None
    self._evict()

  def flush(self, round_num: int) -> None:
    """Writes every state changed since the last flush (call before checkpointing `round_num`)."""
    for cid, (state, produced, dirty) in list(self._cache.items()):
      if dirty:
        if produced > round_num:
          raise ValueError(f'State of {cid!r} is from round {produced}, after {round_num}.')
        self._write(cid, state, produced)
        self._cache[cid] = (state, produced, False)
    self._write_index()

  def restore(self, round_num: int) -> None:
    """Forgets everything produced after `round_num` (resuming from its checkpoint)."""
    self._cache.clear()
    # Every client folder, not only indexed ones: a state evicted to disk after
    # the last flush may belong to a client the index does not list yet.
    for name in os.listdir(self._dir):
      d = os.path.join(self._dir, name)
      if os.path.isdir(d):
        for n in os.listdir(d):
          if n.endswith('.npz') and n[:-4].isdigit() and int(n[:-4]) > round_num:
            os.remove(os.path.join(d, n))
    for cid in list(self._known):
      if not self._versions(cid):
        del self._known[cid]

  def prune(self, oldest_needed_round: int) -> None:
    """Deletes versions older than the newest one at or before `oldest_needed_round`."""
    for cid in self._known:
      versions = self._versions(cid)
      keep_from = max((v for v in versions if v <= oldest_needed_round), default=None)
      for v in versions:
        if keep_from is not None and v < keep_from:
          os.remove(os.path.join(self._client_dir(cid), f'{v:09d}.npz'))

  def sample_known(self, count: int, seed: int) -> List:
    """Up to `count` stored states of distinct visited clients, chosen with `seed`."""
    ids = sorted(self._known)
    random.Random(seed).shuffle(ids)
    return self.get(ids[:count])
