"""The data check every loader runs before anything trains on its clients or is written.

A stranger's file can hold what a loader parses without complaint but a run
must not train on: a NaN or an infinity in a feature (an update then comes
back non-finite and the round quietly rejects that client, every round it is
sampled), a pixel outside the format's range, an example of the wrong shape,
a label outside the task's classes, or a shard that lists a user twice or
disagrees with its own `num_samples`. One check covers them for every
source:

- `client_problem(dataset, client_id, arrays)`: the first bad example of one
  client, described, or None. Features: numeric dtype (the dataset's, the
  same for every client), shape `[n, *element_shape]`, finite, and within
  `dataset.x_range` where the format defines one (pixels in [0, 1] for TFF's
  and LEAF's FEMNIST, the image sets, the digits). Labels: integers, one per
  example, in [0, num_classes). It costs a min and a max per array when the
  client is clean; only a bad client is searched for its first bad example.
- Loader-found problems (`FederatedDataset.problems`, client id -> text): a
  shard's structure (LEAF: a user listed twice, `num_samples` not matching,
  a user without data), found where the file is parsed.
- `check_dataset(dataset)` (called by `FederatedDataset.__post_init__`):
  every client held in memory is checked at once; a dataset read on demand
  (`lazy_clients.LazyClients`) checks each client when it is first read, so
  a bad client found mid-run raises in that round, before its state is
  written. A bad client raises `DataError`, one line: the file, the client,
  the first bad example, and the two fixes (correct or remove it in the file,
  or the opt-in below).
- `dropping_bad_clients()`: inside it (the loaders' `[data] drop_bad_clients
  = true`, applied by `registry.load_dataset`) the datasets built leave out
  their bad clients instead and say how many (a `note:` line). A dataset read
  on demand is then read whole once at start, since a client dropped mid-run
  would change the clients that earlier rounds were sampled from.

`check_ratings` does the same for `movielens.RatingsDataset` (finite
features, ratings in [1, 5]).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from tff_meta.core import logs

DROP_OPTION = 'drop_bad_clients'
DROP_HINT = (f'or set [data] {DROP_OPTION} = true to leave out every client that fails this '
             'check (docs/DATA.md, "The data check")')
RATING_RANGE = (1.0, 5.0)


class DataError(ValueError):
  """Bad or missing data; the message names the file or client and the fix (re-exported by
  `types`, whose dataclasses this module checks)."""


class BadClientError(DataError):
  """One client fails the check: `source`, `client_id` and `problem` (its first bad example)."""

  def __init__(self, source: str, client_id: str, problem: str, count: int = 1):
    super().__init__(describe(source, client_id, problem, count))
    self.source, self.client_id, self.problem = source, client_id, problem


_DROPPING: contextvars.ContextVar[bool] = contextvars.ContextVar('drop_bad_clients',
                                                                default=False)


@contextlib.contextmanager
def dropping_bad_clients(drop: bool = True) -> Iterator[None]:
  """Datasets built inside leave out their bad clients (and note how many) when `drop`."""
  token = _DROPPING.set(bool(drop))
  try:
    yield
  finally:
    _DROPPING.reset(token)


def _first(mask: np.ndarray) -> int:
  """The first example (row) with a True anywhere in its part of `mask`."""
  return int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1))[0])


def feature_problem(x: np.ndarray, element_shape: Tuple[int, ...], dtype: Optional[np.dtype],
                    x_range: Optional[Tuple[float, float]]) -> Optional[str]:
  """What is wrong with a client's features `x` (first bad example), or None."""
  if not isinstance(x, np.ndarray) or x.dtype.kind not in 'fiu':
    kind = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
    return f'features of type {kind}, not numbers'
  if dtype is not None and x.dtype != dtype:
    return f'features of dtype {x.dtype} where the other clients have {dtype}'
  if x.shape[1:] != tuple(element_shape):
    return f'examples of shape {x.shape[1:]}, expected {tuple(element_shape)}'
  if not x.size:
    return None
  lo, hi = x.min(), x.max()   # NaN and infinities reach these
  if x_range is not None:
    if x_range[0] <= lo and hi <= x_range[1]:
      return None
  elif x.dtype.kind != 'f' or (np.isfinite(lo) and np.isfinite(hi)):
    return None
  bad = ~np.isfinite(x) if x.dtype.kind == 'f' else np.zeros(x.shape, bool)
  if x_range is not None:
    with np.errstate(invalid='ignore'):
      bad |= (x < x_range[0]) | (x > x_range[1])
  i = _first(bad)
  at = tuple(int(k) for k in np.argwhere(bad[i])[0])
  value = x[i][at]
  if not np.isfinite(value):
    return f'example {i} has {value} at feature {at} (features must be finite)'
  return (f'example {i} has {value} at feature {at}, outside the format\'s range '
          f'[{x_range[0]:g}, {x_range[1]:g}]')


def label_problem(y: np.ndarray, num_classes: int, n: int) -> Optional[str]:
  """What is wrong with a client's labels `y` (first bad example), or None."""
  if not isinstance(y, np.ndarray) or y.dtype.kind not in 'iu':
    kind = y.dtype if isinstance(y, np.ndarray) else type(y).__name__
    return f'labels of type {kind}, not integers'
  if y.shape != (n,):
    return f'labels of shape {y.shape} for {n} examples (one integer label per example)'
  if n and (y.min() < 0 or y.max() >= num_classes):
    i = int(np.flatnonzero((y < 0) | (y >= num_classes))[0])
    return f'example {i} has label {y[i]}, outside the task\'s classes [0, {num_classes})'
  return None


def client_problem(arrays, element_shape: Tuple[int, ...], num_classes: int,
                   x_range: Optional[Tuple[float, float]] = None,
                   dtype: Optional[np.dtype] = None) -> Optional[str]:
  """The first problem of one client's `arrays` (`ClientArrays`), or None; `dtype`: the
  features' dtype the other clients have."""
  return (feature_problem(arrays.x, element_shape, dtype, x_range)
          or label_problem(arrays.y, num_classes, len(arrays.x)))


def describe(source: str, client_id: str, problem: str, count: int = 1) -> str:
  """The one-line error for a bad client: file, client, first bad example, the fixes."""
  others = f' ({count} clients fail this check)' if count > 1 else ''
  where = f'{source}: ' if source else ''
  return (f'{where}client {client_id!r}: {problem}{others}. Correct or remove that client\'s '
          f'examples in the file, {DROP_HINT}.')


def _raise_or_drop(bad: Dict[str, Tuple[str, str]], drop_from: Callable[[List[str]], int],
                   what: str) -> None:
  """`bad`: client id -> (source, problem), in the clients' order."""
  if not bad:
    return
  cid, (source, problem) = next(iter(bad.items()))
  if not _DROPPING.get():
    raise BadClientError(source, cid, problem, len(bad))
  left = drop_from(list(bad))
  if left == 0:
    raise DataError(f'{source}: every one of the {len(bad)} {what} fails the data check, so '
                    f'{DROP_OPTION} leaves none; first: client {cid!r}: {problem}.')
  count = f'{len(bad)} {what if len(bad) > 1 else what[:-1]}'
  logs.note(f'{source}: dropped {count} that fail the data check ([data] '
            f'{DROP_OPTION} = true), {left} left; first: client {cid!r}: {problem}.')


def check_dataset(dataset) -> None:
  """Checks a `FederatedDataset` (see the module docstring); raises `DataError` or drops."""
  source = dataset.source or dataset.name
  bad = dict(dataset.problems)
  clients = dataset.clients
  spec = (dataset.element_shape, dataset.num_classes, dataset.x_range)
  if getattr(clients, 'sizes', None) is not None:   # a LazyClients: each client when read
    source = clients.source or source
    first_dtype: List[np.dtype] = []

    def check(client_id: str, arrays) -> None:
      problem = client_problem(arrays, *spec, first_dtype[0] if first_dtype else None)
      if problem is not None:
        raise BadClientError(source, client_id, problem)
      if not first_dtype:
        first_dtype.append(arrays.x.dtype)

    clients.check = check
    if _DROPPING.get():
      for cid in list(clients.sizes):
        if cid not in bad:
          problem = _read_problem(clients, cid)
          if problem is not None:
            bad[cid] = (source, problem)
    _raise_or_drop(bad, clients.drop, 'clients')
    return
  dtype = None
  for cid, arrays in clients.items():
    if cid in bad:
      continue
    problem = client_problem(arrays, *spec, dtype)
    if problem is not None:
      bad[cid] = (source, problem)
    elif dtype is None:
      dtype = arrays.x.dtype
  order = {cid: i for i, cid in enumerate(clients)}
  bad = dict(sorted(bad.items(), key=lambda kv: order.get(kv[0], -1)))

  def drop(ids: List[str]) -> int:
    for cid in ids:
      clients.pop(cid, None)
    return len(clients)
  _raise_or_drop(bad, drop, 'clients')


def _read_problem(clients, client_id: str) -> Optional[str]:
  """A lazily read client's problem, read through its own check (None when clean)."""
  try:
    clients[client_id]
  except BadClientError as e:
    return e.problem
  return None


def check_ratings(dataset) -> None:
  """Checks a `movielens.RatingsDataset`: finite features, ratings finite in [1, 5]."""
  bad = {}
  for uid, user in dataset.clients.items():
    n = len(user.ratings)
    problem = feature_problem(np.asarray(user.ratings).reshape(n, 1), (1,), None, RATING_RANGE)
    if problem is not None:
      bad[uid] = (dataset.name, problem.replace('features', 'ratings').replace(
          ' at feature (0,)', ''))
      continue
    for name, values in user.features.items():
      values = np.asarray(values)
      if len(values) != n:
        bad[uid] = (dataset.name, f'feature {name!r} has {len(values)} values for {n} ratings')
        break
      problem = feature_problem(values, values.shape[1:], None, None)
      if problem is not None:
        bad[uid] = (dataset.name, f'feature {name!r}: {problem}')
        break

  def drop(ids: List[str]) -> int:
    for uid in ids:
      dataset.clients.pop(uid, None)
    return len(dataset.clients)
  _raise_or_drop(bad, drop, 'users')
