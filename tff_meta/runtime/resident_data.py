"""Client data kept on the TFF worker between rounds; a round sends row positions.

A grouped round's data (`runtime/grouped.py`: per data key, the rows of
a group's clients concatenated) are most of what a resident round sends to
the worker: 64 EMNIST clients are 20 MB a round, whose transfer took longer
than the MLP's whole round in plain TF (docs/runs/scaling_256). Yet a
client's arrays are mostly the same objects round after round (its support
and query sets). `DataPool` keeps such arrays on the worker in a *pool* (per
data key, the rows of many clients) and sends each round, per group, only
the positions of its rows and the rows not in the pool (`fresh`);
`gather_computation` rebuilds the group's data on the worker, row for row
the data `grouped.pack_group` would have sent, so the round computes
exactly what it computed before (`tests/runtime/test_resident_data.py`).

Which arrays are pooled: an array joins the pool in a round where it is
seen a second time, by content: its key (shape, dtype and a digest of a
strided sample of `KEY_SAMPLES` values) names the pooled arrays it may be, and it is taken
for one of them only if it is that very array or every value equals. Keys
may collide (EMNIST query sets are mostly background pixels, and a small
sample of them is often all background), so a key holds a list of arrays.
So a client read on demand, whose arrays are new objects every round, is
pooled like one held in memory, while arrays whose values change every
round (FedAvg's shuffled data, resampled support sets) only travel with
their round, as before. The
pool is sent again whole when it grows, which happens when a round's
recurring arrays amount to at least a quarter of it (so the resending adds
up to a few times the pool); it stops growing at `max_bytes`.

Type signatures (P = the pool: per data key k, a tensor of rows [?, ...]
of the group spec's k; I = a group's <fresh=P, positions=<k: int32[?]>,
rows=int32[?,R]>, positions past the pool's rows index `fresh`; G = a
group's data, `grouped.group_spec`):
    gather: (<P@CLIENTS, {I}@CLIENTS> -> {G}@CLIENTS)   # P all-equal at CLIENTS

The pool is placed at CLIENTS (all-equal), not at SERVER: TFF's worker keeps
SERVER and CLIENTS values in separate child executors, so a `federated_broadcast`
of a SERVER value copies it from one to the other (serialized and parsed again)
at every call, several times the gather itself for 19 MB of EMNIST rows
(`benchmarks/pool_placement.py`; docs/DECISIONS.md, "Client data kept on the worker").
"""

from __future__ import annotations

import collections
import hashlib
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.runtime import grouped

# The pool stops growing at this size (bytes on the worker).
MAX_BYTES = 1 << 30
# Keys of arrays seen and not pooled that are remembered (the oldest forgotten first).
MAX_SEEN = 1 << 20
# Values an array's key samples (evenly strided).
KEY_SAMPLES = 1024


def pool_spec(data_spec: Mapping[str, tf.TensorSpec]) -> collections.OrderedDict:
  """The pool's spec (P): each key's rows, as in a group's data."""
  return grouped.group_spec(data_spec)['data']


def positions_spec(data_spec: Mapping[str, tf.TensorSpec]) -> collections.OrderedDict:
  """A group's spec (I) on the way to the worker: fresh rows, positions, rows per client."""
  spec = grouped.group_spec(data_spec)
  return collections.OrderedDict(
      fresh=spec['data'],
      positions=collections.OrderedDict((k, tf.TensorSpec([None], tf.int32)) for k in data_spec),
      rows=spec['rows'])


def gather_group(pool, group):
  """Pure TF: a group's data (G) from the pool and its positions (I)."""
  data = collections.OrderedDict()
  for k, rows in pool.items():
    index = group['positions'][k]
    pooled = tf.shape(rows, out_type=tf.int32)[0]
    in_pool = index < pooled
    where = tf.range(tf.size(index))
    value = tf.dynamic_stitch(
        [tf.boolean_mask(where, in_pool), tf.boolean_mask(where, ~in_pool)],
        [tf.gather(rows, tf.boolean_mask(index, in_pool)),
         tf.gather(group['fresh'][k], tf.boolean_mask(index, ~in_pool) - pooled)])
    value.set_shape(rows.shape)
    data[k] = value
  return collections.OrderedDict(data=data, rows=group['rows'])


def gather_computation(data_spec: Mapping[str, tf.TensorSpec]) -> tff.Computation:
  """gather: (<P@CLIENTS, {I}@CLIENTS> -> {G}@CLIENTS), the module's layouts for `data_spec`."""
  pool_type = tff.types.tensorflow_to_type(pool_spec(data_spec))
  group_type = tff.types.tensorflow_to_type(positions_spec(data_spec))
  gather = tff.tensorflow.computation(gather_group, pool_type, group_type)

  @tff.federated_computation(tff.FederatedType(pool_type, tff.CLIENTS, all_equal=True),
                             tff.FederatedType(group_type, tff.CLIENTS))
  def gather_groups(pool, groups):
    return tff.federated_map(gather, (pool, groups))

  return gather_groups


def pooled_next(next_fn: tff.Computation, data_spec: Mapping[str, tf.TensorSpec]
                ) -> tff.Computation:
  """`next_fn` (a grouped round, its data last) with its data gathered from the pool.

      (<S@SERVER, [{C*}@CLIENTS,] P@CLIENTS, {I}@CLIENTS> -> next_fn's result)

  One call a round, the gather inside it: `next_fn` itself, its type signature
  and its results are unchanged; only how its data argument is made.
  """
  gather = gather_computation(data_spec)
  pool_type, positions_type = list(gather.type_signature.parameter)
  leading = list(next_fn.type_signature.parameter)[:-1]
  if len(leading) == 1:
    @tff.federated_computation(leading[0], pool_type, positions_type)
    def round_fn(state, pool, positions):
      return next_fn(state, gather(pool, positions))
  elif len(leading) == 2:
    @tff.federated_computation(leading[0], leading[1], pool_type, positions_type)
    def round_fn(state, client_states, pool, positions):   # pylint: disable=function-redefined
      return next_fn(state, client_states, gather(pool, positions))
  else:
    raise ValueError(f'A round takes its state, [client states,] and data; '
                     f'got {next_fn.type_signature.parameter}.')
  return round_fn


class DataPool:
  """Which client arrays live on the worker, and each round's positions into them."""

  def __init__(self, data_spec: Mapping[str, tf.TensorSpec], max_bytes: int = MAX_BYTES):
    self.data_spec = self._spec = collections.OrderedDict(data_spec)
    self._ragged = grouped.ragged_keys(self._spec)
    self._max_bytes = max_bytes
    self._pool: Dict[str, List[np.ndarray]] = {k: [] for k in self._spec}
    # key -> the pooled arrays with that key, each as (first pool row, array, its rows)
    self._start: Dict[tuple, List[Tuple[int, np.ndarray, np.ndarray]]] = {}
    self._rows = {k: 0 for k in self._spec}
    self._bytes = 0
    self._seen: Dict[tuple, None] = {}   # keys of arrays seen, oldest first
    self._sent = False   # whether the worker has the pool yet
    self._round_keys: Dict[int, tuple] = {}   # id -> (array, key) within a `plan`
    self._round_starts: Dict[int, int] = {}   # id -> first pool row, found within a `plan`
    self._pooled_keys: Dict[int, tuple] = {}  # id -> (array, key) of the pooled arrays (held)

  def _concat(self, key: str, parts: List[np.ndarray]) -> np.ndarray:
    if parts:
      return np.concatenate(parts)
    spec = pool_spec(self._spec)[key]
    return np.zeros([0, *spec.shape[1:]], spec.dtype.as_numpy_dtype)

  def _rows_of(self, key: str, value) -> np.ndarray:
    """`value` of `key` as the rows it adds to a group (module `grouped`'s layout)."""
    rows = np.asarray(value, self._spec[key].dtype.as_numpy_dtype)
    return rows if key in self._ragged else rows[np.newaxis]

  def _key(self, key: str, value) -> tuple:
    """`value`'s key: its data key, shape, dtype and a digest of a strided sample of its values
    (16 bytes, so the `MAX_SEEN` keys remembered stay small; equal keys are confirmed value
    by value, as colliding samples are), made once per array in a `plan` and kept for the
    pooled arrays, which the pool holds, so their ids stay theirs."""
    known = self._pooled_keys.get(id(value)) or self._round_keys.get(id(value))
    if known is not None and known[0] is value:
      return known[1]
    flat = np.asarray(value).reshape(-1)
    sample = flat[::max(1, len(flat) // KEY_SAMPLES)]
    made = (key, np.shape(value), np.asarray(value).dtype.str,
            hashlib.blake2b(sample.tobytes(), digest_size=16).digest())
    self._round_keys[id(value)] = (value, made)
    return made

  def _find(self, entries, key: str, value):
    """The entry of `entries` holding `value` (the very array, or equal values), or None."""
    for entry in entries:
      if entry[1] is value:
        return entry
    rows = None
    for entry in entries:
      rows = self._rows_of(key, value) if rows is None else rows
      if np.array_equal(entry[2], rows):
        return entry
    return None

  def _pooled(self, key: str, value) -> Optional[int]:
    """The first pool row of `value` (the same values pooled), or None; a row found is
    kept for the rest of the `plan`, so equal values are compared once a round."""
    start = self._round_starts.get(id(value))
    if start is not None:
      return start
    found = self._find(self._start.get(self._key(key, value), ()), key, value)
    if found is None:
      return None
    self._round_starts[id(value)] = found[0]
    return found[0]

  def plan(self, groups: Sequence[Sequence[Mapping]]):
    """(the pool to send, or None if the worker's is current; each group's I) for a round.

    `groups` holds each group's clients' data (one mapping per client).
    """
    self._round_keys, self._round_starts = {}, {}
    try:
      return self._plan(groups)
    finally:
      self._round_keys, self._round_starts = {}, {}   # the round's arrays are not held past it

  def _plan(self, groups):
    recurring = self._recurring(groups)
    new_bytes = sum(self._rows_of(k, v).nbytes for _, k, v in recurring)
    grows = (recurring and 4 * new_bytes >= self._bytes
             and self._bytes + new_bytes <= self._max_bytes)
    if grows:
      for key, k, v in recurring:
        self._pool[k].append(self._rows_of(k, v))
        self._start.setdefault(key, []).append((self._rows[k], v, self._pool[k][-1]))
        self._pooled_keys[id(v)] = (v, key)
        self._rows[k] += len(self._pool[k][-1])
      self._bytes += new_bytes
    upload = None
    if grows or not self._sent:
      upload = collections.OrderedDict((k, self._concat(k, self._pool[k])) for k in self._spec)
      self._sent = True
    self._remember(groups)
    return upload, [self._positions(g) for g in groups]

  def _recurring(self, groups) -> List[Tuple[tuple, str, np.ndarray]]:
    """The round's arrays whose key was seen in an earlier round and that are not
    pooled yet, each once, as (key, data key, array). A colliding key may pool an
    array seen only once; that costs pool space, never a wrong row."""
    out, taken = [], {}
    for group in groups:
      for client in group:
        for k in self._spec:
          v = client[k]
          key = self._key(k, v)
          if key not in self._seen:
            continue
          entries = taken.setdefault(key, [])
          if self._pooled(k, v) is None and self._find(entries, k, v) is None:
            entries.append((None, v, self._rows_of(k, v)))
            out.append((key, k, v))
    return out

  def _remember(self, groups) -> None:
    for group in groups:
      for client in group:
        for k in self._spec:
          key = self._key(k, client[k])
          self._seen.pop(key, None)
          self._seen[key] = None   # the newest last
    while len(self._seen) > MAX_SEEN:
      del self._seen[next(iter(self._seen))]

  def _positions(self, clients: Sequence[Mapping]) -> collections.OrderedDict:
    """One group's I: its pooled rows by position, the others sent in `fresh`."""
    fresh = collections.OrderedDict()
    positions = collections.OrderedDict()
    for k in self._spec:
      parts, starts, counts, next_fresh = [], [], [], self._rows[k]
      for c in clients:
        rows = self._rows_of(k, c[k])
        start = self._pooled(k, c[k])
        if start is None:
          start = next_fresh
          next_fresh += len(rows)
          parts.append(rows)
        starts.append(start)
        counts.append(len(rows))
      fresh[k] = self._concat(k, parts)
      positions[k] = _ranges(starts, counts)
    rows = np.array([[len(c[k]) for k in self._ragged] for c in clients], np.int32)
    return collections.OrderedDict(fresh=fresh, positions=positions,
                                   rows=rows.reshape(len(clients), len(self._ragged)))


def _ranges(starts: Sequence[int], counts: Sequence[int]) -> np.ndarray:
  """int32 [starts[0], ..., starts[0] + counts[0] - 1, starts[1], ...]: the ranges joined."""
  counts = np.asarray(counts, np.int64)
  total = int(counts.sum())
  # Each position is its range's start plus its offset within the range.
  offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
  return (np.repeat(np.asarray(starts, np.int64), counts) + offsets).astype(np.int32)
