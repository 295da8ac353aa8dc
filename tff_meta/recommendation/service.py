"""Service recommendation on per-user event logs (FedMeta Sec. 4.3, Appendix A.4;
Chen et al. 2018b Sec. 3.2, Tables 5-6).

Split (Table 6): per user, in time order, the last 20% of events are the query
set and the fraction p (80% or 5%) just before them the support set.

Labels: in META and SELF every user has its own label space of at most C = 40
classes (Sec. 3.2: "a classifier for 40 classes would suffice"). Local ids
are given by the support set only: most used first, ties by earlier first
use; beyond C services the rest are dropped (and their support events left out). A query event whose service
is not in the support set's label space gets label -1 and is always a miss; a
training task's query events of that kind are left out.

Features of an event (META and SELF; Sec. 3.2: "last used service", time, context):

  last      one-hot of the previous event's local label, or the slot C for
            none / a service outside the label space         C + 1
  hour      one-hot of the UTC hour                           24
  weekday   one-hot of the UTC day of week                    7
  context   one-hot of each context column's value            sum of vocabularies

The previous event is the user's event just before, whatever split it is in
(the device knows what was used last). Context vocabularies are the sorted
values of the whole log (no label information).

MIXED (NN-unified): one classifier over the global item catalogue, with the
user id and the last item as global one-hots (Sec. 3.2: "the feature vector
further encodes user ID and service ID"), plus hour, weekday and context.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Dict, List, Sequence, Tuple

import numpy as np

from tff_meta.data.movielens import chronological_split
from tff_meta.recommendation.event_log import EventLog, UserEvents
from tff_meta.recommendation.tasks import Episode, split_users

NUM_LOCAL_CLASSES = 40


def local_label_space(labels: Sequence[str], max_classes: int) -> Dict[str, int]:
  """Global label -> local id: most frequent first, ties by first use; at most max_classes."""
  counts = collections.Counter(labels)
  first = {}
  for i, label in enumerate(labels):
    first.setdefault(label, i)
  ranked = sorted(counts, key=lambda l: (-counts[l], first[l]))
  return {l: i for i, l in enumerate(ranked[:max_classes])}


def _time_columns(ts: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  ts = np.asarray(ts, np.int64)
  return (ts // 3600) % 24, ((ts // 86400) + 3) % 7


@dataclasses.dataclass
class Categorical:
  """An event's categorical features, one int column each (for NB and encoders)."""
  columns: Dict[str, np.ndarray]
  sizes: Dict[str, int]

  def take(self, idx) -> 'Categorical':
    return Categorical({k: v[idx] for k, v in self.columns.items()}, self.sizes)

  def one_hot(self) -> np.ndarray:
    n = len(next(iter(self.columns.values())))
    out = np.zeros((n, sum(self.sizes.values())), np.float32)
    offset = 0
    for name, size in self.sizes.items():
      out[np.arange(n), offset + self.columns[name]] = 1.0
      offset += size
    return out


class ServiceEncoder:
  """Encodes users of one `EventLog` (see module doc); deterministic."""

  def __init__(self, log: EventLog, max_classes: int = NUM_LOCAL_CLASSES):
    self.max_classes = int(max_classes)
    self.context_columns = log.context_columns
    self.vocab = {c: {v: i for i, v in enumerate(sorted({x for u in log.users.values()
                                                         for x in u.context[c]}))}
                  for c in log.context_columns}
    self.items = {l: i for i, l in enumerate(log.items)}
    self.user_ids = {u: i for i, u in enumerate(sorted(log.users))}

  @property
  def local_dim(self) -> int:
    return self.max_classes + 1 + 24 + 7 + sum(len(v) for v in self.vocab.values())

  @property
  def unified_dim(self) -> int:
    return (len(self.user_ids) + len(self.items) + 1 + 24 + 7
            + sum(len(v) for v in self.vocab.values()))

  def _common(self, user: UserEvents) -> Tuple[Dict[str, np.ndarray], Dict[str, int]]:
    hour, weekday = _time_columns(user.timestamps)
    cols = {'hour': hour, 'weekday': weekday}
    sizes = {'hour': 24, 'weekday': 7}
    for c in self.context_columns:
      vocab = self.vocab[c]
      cols[c] = np.array([vocab.get(v, 0) for v in user.context[c]], np.int64)
      sizes[c] = len(vocab)
    return cols, sizes

  def local(self, user: UserEvents, space: Dict[str, int]) -> Tuple[Categorical, np.ndarray]:
    """(categorical features, local labels; -1 outside `space`) of every event of a user."""
    labels = np.array([space.get(l, -1) for l in user.labels], np.int64)
    last = np.r_[-1, labels[:-1]]
    last = np.where(last < 0, self.max_classes, last)
    cols, sizes = self._common(user)
    return (Categorical({'last': last, **cols}, {'last': self.max_classes + 1, **sizes}),
            labels.astype(np.int32))

  def unified(self, uid: str, user: UserEvents) -> Tuple[np.ndarray, np.ndarray]:
    """(one-hot features [n, unified_dim], global item labels) of every event of a user."""
    labels = np.array([self.items[l] for l in user.labels], np.int64)
    last = np.r_[len(self.items), labels[:-1]]
    cols, sizes = self._common(user)
    cat = Categorical({'user': np.full(len(user), self.user_ids[uid]), 'last': last, **cols},
                      {'user': len(self.user_ids), 'last': len(self.items) + 1, **sizes})
    return cat.one_hot(), labels.astype(np.int32)


@dataclasses.dataclass
class ServiceUser:
  """A test user: its episode in the local label space, plus what the baselines need."""
  episode: Episode                 # one-hot features, local labels
  support_cat: Categorical
  query_cat: Categorical
  history_labels: np.ndarray       # local labels of all events before each query event
  query_start: int                 # index of the first query event in the user's log
  unified: Episode                 # global features and labels (MIXED)


def test_user(encoder: ServiceEncoder, uid: str, user: UserEvents, support_fraction: float,
              query_fraction: float = 0.2) -> ServiceUser:
  s, q = chronological_split(len(user), support_fraction, query_fraction)
  space = local_label_space(list(user.labels[s]), encoder.max_classes)
  cat, labels = encoder.local(user, space)
  x = cat.one_hot()
  ux, uy = encoder.unified(uid, user)
  s = s[labels[s] >= 0]          # support events beyond the C most used services
  return ServiceUser(
      episode=Episode(uid, x[s], labels[s], x[q], labels[q]),
      support_cat=cat.take(s), query_cat=cat.take(q), history_labels=labels,
      query_start=int(q[0]), unified=Episode(uid, ux[s], uy[s], ux[q], uy[q]))


def training_episode(encoder: ServiceEncoder, uid: str, user: UserEvents, *, max_events: int,
                     support_fraction: float, seed: int, episode_num: int) -> Episode:
  """A meta-training task (Sec. 3.2): min(max_events, n // 2) consecutive events at a seeded
  position; the first `support_fraction` are support, the rest query (query events outside
  the support's label space are left out)."""
  n = len(user)
  size = max(2, min(max_events, n // 2)) if n >= 4 else n
  start = int(np.random.default_rng([seed, episode_num, n]).integers(0, n - size + 1))
  window = UserEvents(user.timestamps[start:start + size], user.labels[start:start + size],
                      {c: v[start:start + size] for c, v in user.context.items()})
  s, q = chronological_split(size, support_fraction, 1.0 - support_fraction)
  space = local_label_space(list(window.labels[s]), encoder.max_classes)
  cat, labels = encoder.local(window, space)
  x = cat.one_hot()
  s, q = s[labels[s] >= 0], q[labels[q] >= 0]
  return Episode(uid, x[s], labels[s], x[q], labels[q])


@dataclasses.dataclass
class ServiceTasks:
  encoder: ServiceEncoder
  train_ids: List[str]
  test: List[ServiceUser]
  log: EventLog

  @property
  def num_train_users(self) -> int:
    return len(self.train_ids)

  def fingerprint(self) -> None:
    """None: service runs record no hash of their event log, so reports group them by path."""
    return None

  def summary(self) -> str:
    nq = sum(len(u.episode.query_y) for u in self.test)
    unseen = sum(int(np.sum(u.episode.query_y < 0)) for u in self.test)
    return (f'{len(self.train_ids)} training users, {len(self.test)} testing users, '
            f'{nq} query events ({unseen} of services absent from the support set); '
            f'features: {self.encoder.local_dim} (local), {self.encoder.unified_dim} (unified)')


def service_tasks(log: EventLog, *, support_fraction: float, train_user_fraction: float = 0.8,
                  query_fraction: float = 0.2, max_classes: int = NUM_LOCAL_CLASSES,
                  seed: int = 0) -> ServiceTasks:
  encoder = ServiceEncoder(log, max_classes)
  train_ids, test_ids = split_users(sorted(log.users), train_user_fraction, seed)
  test = [test_user(encoder, u, log.users[u], support_fraction, query_fraction)
          for u in test_ids]
  return ServiceTasks(encoder, train_ids, test, log)
