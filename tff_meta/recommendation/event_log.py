"""Per-user event logs for service recommendation (FedMeta Sec. 4.3; Chen et al. 2018b Sec. 3.2).

A log is a CSV or Parquet table with one row per event:

  user_id    any id (read as text)
  timestamp  unix seconds (int/float) or a date-time text pandas can parse (UTC)
  label      the service / item used (read as text)
  ...        optional context columns (categorical; read as text, e.g. location,
             network, battery level)

`read_event_log` checks it and fails with a `DataError` naming the problem and
the fix: a missing column, an empty label, a timestamp that is not a time, or
timestamps that go backwards within a user (sort the file by user and time, or
pass `sort=True`). Users with fewer than `min_events` events (default 2: a
chronological split needs one support and one query event) are dropped, and
the count is logged (a documented filter, not an error).

`generate_event_log` writes a realistic synthetic log for tests and demos:
each user has a few habitual services (2-36 of a global catalogue, Zipf
popularity), a daily routine (location by hour: home, commute, work), and
habitual sequences (a sparse per-user Markov chain over its services whose
next-service choice also depends on the location), with the network context
following the location. The production data of the papers is private; this
generator only stands in for its shape, and results on it are labelled
synthetic.

`movielens_events` turns an ml-100k folder into such a log (the item is the
movie's genre), a real-data demonstration of the pipeline.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from tff_meta.data.types import DataError

REQUIRED = ('user_id', 'timestamp', 'label')


@dataclasses.dataclass
class UserEvents:
  """One user's events in time order: int64 unix seconds, str labels, str contexts."""
  timestamps: np.ndarray
  labels: np.ndarray
  context: Dict[str, np.ndarray]

  def __len__(self) -> int:
    return len(self.labels)


@dataclasses.dataclass
class EventLog:
  users: Dict[str, UserEvents]
  context_columns: Tuple[str, ...]
  dropped_users: int = 0
  source: str = ''

  @property
  def num_events(self) -> int:
    return sum(len(u) for u in self.users.values())

  @property
  def items(self) -> Tuple[str, ...]:
    return tuple(sorted({l for u in self.users.values() for l in u.labels}))

  def summary(self) -> str:
    return (f'{self.source or "event log"}: {len(self.users)} users, {self.num_events} events, '
            f'{len(self.items)} items, context {list(self.context_columns)}'
            + (f'; {self.dropped_users} users with too few events dropped'
               if self.dropped_users else ''))


def _read_table(path: str):
  import pandas as pd  # pylint: disable=g-import-not-at-top
  if not os.path.isfile(path):
    raise DataError(f'Event log {path!r} does not exist. Give a CSV or Parquet file with columns '
                    'user_id, timestamp, label (and optional context columns).')
  try:
    if path.endswith(('.parquet', '.pq')):
      return pd.read_parquet(path)
    return pd.read_csv(path, dtype=str, keep_default_na=False)
  except Exception as e:  # pandas / pyarrow parse errors have many types
    raise DataError(f'Cannot read event log {path!r} as '
                    f'{"Parquet" if path.endswith((".parquet", ".pq")) else "CSV"}: {e}') from e


def _timestamps(values, path: str) -> np.ndarray:
  import pandas as pd  # pylint: disable=g-import-not-at-top
  numeric = pd.to_numeric(pd.Series(values), errors='coerce')
  if not numeric.isna().any():
    return numeric.to_numpy(np.float64).astype(np.int64)
  parsed = pd.to_datetime(pd.Series(values), errors='coerce', utc=True, format='mixed')
  bad = np.flatnonzero(parsed.isna().to_numpy())
  if bad.size:
    raise DataError(f'{path}: timestamp {values[bad[0]]!r} (data row {bad[0] + 1}) is neither unix '
                    'seconds nor a date-time. Use unix seconds or ISO 8601 times.')
  return (parsed.astype('int64') // 10**9).to_numpy(np.int64)


def read_event_log(path: str, *, context_columns: Optional[Sequence[str]] = None,
                   min_events: int = 2, sort: bool = False) -> EventLog:
  """Reads and checks a log (see module doc). `context_columns` None = all other columns."""
  table = _read_table(path)
  missing = [c for c in REQUIRED if c not in table.columns]
  if missing:
    raise DataError(f'{path}: missing column(s) {missing}; an event log needs columns '
                    f'{list(REQUIRED)} (found {list(table.columns)}). Rename the columns.')
  context = (tuple(c for c in table.columns if c not in REQUIRED) if context_columns is None
             else tuple(context_columns))
  absent = [c for c in context if c not in table.columns]
  if absent:
    raise DataError(f'{path}: context column(s) {absent} not in the log (columns: '
                    f'{list(table.columns)}).')
  users_col = table['user_id'].astype(str).to_numpy()
  labels = table['label'].astype(str).to_numpy()
  empty = np.flatnonzero((labels == '') | (labels == 'nan'))
  if empty.size:
    raise DataError(f'{path}: empty label in data row {empty[0] + 1}. Every event needs the '
                    'service/item used.')
  ts = _timestamps(table['timestamp'].astype(str).to_numpy(), path)
  ctx = {c: table[c].astype(str).to_numpy() for c in context}
  users, dropped = {}, 0
  order = np.argsort(users_col, kind='stable')
  bounds = np.flatnonzero(np.r_[True, users_col[order][1:] != users_col[order][:-1], True])
  for a, b in zip(bounds[:-1], bounds[1:]):
    rows = order[a:b]
    uid = users_col[rows[0]]
    back = np.flatnonzero(np.diff(ts[rows]) < 0)
    if back.size:
      if not sort:
        raise DataError(f'{path}: timestamps of user {uid!r} go backwards at data row '
                        f'{rows[back[0] + 1] + 1}. Sort the log by user_id and timestamp, or '
                        'pass sort=True (programs.train: --sort_log=true).')
      rows = rows[np.argsort(ts[rows], kind='stable')]
    if len(rows) < min_events:
      dropped += 1
      continue
    users[uid] = UserEvents(ts[rows], labels[rows], {c: v[rows] for c, v in ctx.items()})
  if dropped:
    logging.info('%s: dropped %d users with fewer than %d events.', path, dropped, min_events)
  if not users:
    raise DataError(f'{path}: no user has at least {min_events} events.')
  return EventLog(users, context, dropped, source=path)


LOCATIONS = ('home', 'commute', 'work')


def _location(hour: int, weekday: int, rng) -> str:
  if weekday >= 5 or hour < 7 or hour >= 20:
    return 'home' if rng.random() < 0.9 else 'commute'
  if hour in (7, 8, 17, 18, 19):
    return 'commute' if rng.random() < 0.7 else 'home'
  return 'work' if rng.random() < 0.85 else 'commute'


def generate_event_log(num_users: int = 100, *, num_services: int = 300,
                       events: Tuple[int, int] = (100, 400), days: int = 30,
                       seed: int = 0):
  """A synthetic log as a pandas DataFrame (see module doc); deterministic in `seed`."""
  import pandas as pd  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng([seed, 4])
  popularity = 1.0 / np.arange(1, num_services + 1) ** 1.1
  popularity /= popularity.sum()
  start = 1_500_000_000 - 1_500_000_000 % 86400   # a UTC midnight
  rows = []
  for u in range(num_users):
    k = int(np.clip(rng.geometric(0.12) + 1, 2, 36))
    services = rng.choice(num_services, size=k, replace=False, p=popularity)
    # Per location: a sparse Markov chain over the user's services.
    chains = {}
    for loc in LOCATIONS:
      favourite = rng.dirichlet(np.full(k, 0.3))
      chain = rng.dirichlet(np.full(k, 0.15), size=k)
      chains[loc] = 0.6 * chain + 0.4 * favourite
    n = int(rng.integers(events[0], events[1] + 1))
    gaps = rng.exponential(days * 86400 / n, size=n)
    times = start + np.cumsum(gaps).astype(np.int64)
    prev = int(rng.integers(k))
    for t in times:
      hour, weekday = int(t // 3600 % 24), int((t // 86400 + 3) % 7)
      loc = _location(hour, weekday, rng)
      network = 'wifi' if loc != 'commute' and rng.random() < 0.9 else 'cellular'
      prev = int(rng.choice(k, p=chains[loc][prev]))
      rows.append((f'u{u:04d}', int(t), f's{services[prev]:04d}', loc, network))
  return pd.DataFrame(rows, columns=['user_id', 'timestamp', 'label', 'location', 'network'])


def from_frame(frame, context_columns: Sequence[str], source: str) -> EventLog:
  """An `EventLog` from a DataFrame already sorted by user and time (generator output)."""
  return EventLog(
      {u: UserEvents(g['timestamp'].to_numpy(np.int64), g['label'].to_numpy(str),
                     {c: g[c].to_numpy(str) for c in context_columns})
       for u, g in frame.groupby('user_id', sort=True)},
      tuple(context_columns), source=source)


def movielens_events(path: str):
  """MovieLens-100k as an event stream: each rating is an event whose label is the movie's
  first genre (ml-100k's u.genre order; 'unknown' when it has none), no context columns."""
  import pandas as pd  # pylint: disable=g-import-not-at-top
  from tff_meta.data.movielens import GENRES, load_movielens  # pylint: disable=g-import-not-at-top
  ds = load_movielens(path)
  rows = []
  for uid, user in ds.clients.items():
    first = np.argmax(user.features['genres'] > 0, axis=1)
    rows += [(uid, int(t), GENRES[g]) for t, g in zip(user.features['timestamp'], first)]
  return pd.DataFrame(rows, columns=['user_id', 'timestamp', 'label'])


def write_event_log(frame, path: str) -> str:
  """Writes a DataFrame as CSV, or Parquet when `path` ends in .parquet."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  if path.endswith(('.parquet', '.pq')):
    frame.to_parquet(path, index=False)
  else:
    frame.to_csv(path, index=False)
  return path
