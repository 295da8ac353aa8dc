"""Event-log reading (CSV, Parquet), its errors, the generator and the service split."""

import numpy as np
import pandas as pd
import pytest

from tff_meta.data.types import DataError
from tff_meta.recommendation import event_log, service


def _write(tmp_path, rows, columns=('user_id', 'timestamp', 'label', 'location'), name='log.csv'):
  return event_log.write_event_log(pd.DataFrame(rows, columns=list(columns)),
                                   str(tmp_path / name))


GOOD = [('a', 10, 'mail', 'home'), ('a', 20, 'maps', 'work'), ('b', 5, 'mail', 'home'),
        ('a', 30, 'mail', 'home'), ('b', 7, 'game', 'home'), ('c', 1, 'mail', 'home')]


@pytest.mark.parametrize('name', ['log.csv', 'log.parquet'])
def test_reads_csv_and_parquet_and_drops_single_event_users(tmp_path, name):
  log = event_log.read_event_log(_write(tmp_path, GOOD, name=name))
  assert sorted(log.users) == ['a', 'b'] and log.dropped_users == 1      # 'c' has one event
  assert log.context_columns == ('location',)
  a = log.users['a']
  np.testing.assert_array_equal(a.timestamps, [10, 20, 30])
  assert list(a.labels) == ['mail', 'maps', 'mail'] and list(a.context['location']) == [
      'home', 'work', 'home']
  assert log.items == ('game', 'mail', 'maps') and log.num_events == 5


def test_iso_timestamps(tmp_path):
  rows = [('a', '2020-01-01T10:00:00Z', 'x'), ('a', '2020-01-01T11:00:00Z', 'y')]
  log = event_log.read_event_log(_write(tmp_path, rows, columns=('user_id', 'timestamp', 'label')))
  np.testing.assert_array_equal(log.users['a'].timestamps, [1577872800, 1577876400])


def test_bad_logs_have_clear_errors(tmp_path):
  with pytest.raises(DataError, match=r"missing column\(s\) \['label'\]"):
    event_log.read_event_log(_write(tmp_path, [('a', 1, 'h')], ('user_id', 'timestamp', 'where')))
  unsorted = [('a', 20, 'x', 'h'), ('a', 10, 'y', 'h')]
  with pytest.raises(DataError, match="user 'a' go backwards at data row 2.*sort=True"):
    event_log.read_event_log(_write(tmp_path, unsorted))
  fixed = event_log.read_event_log(_write(tmp_path, unsorted), sort=True)
  assert list(fixed.users['a'].labels) == ['y', 'x']
  with pytest.raises(DataError, match="timestamp 'soon'"):
    event_log.read_event_log(_write(tmp_path, [('a', 'soon', 'x', 'h'), ('a', 2, 'y', 'h')]))
  with pytest.raises(DataError, match='empty label in data row 1'):
    event_log.read_event_log(_write(tmp_path, [('a', 1, '', 'h'), ('a', 2, 'y', 'h')]))
  with pytest.raises(DataError, match='no user has at least 2 events'):
    event_log.read_event_log(_write(tmp_path, [('a', 1, 'x', 'h')]))
  with pytest.raises(DataError, match='does not exist'):
    event_log.read_event_log(str(tmp_path / 'missing.csv'))


def test_generator_is_deterministic_and_habitual():
  a = event_log.generate_event_log(6, num_services=40, events=(50, 80), seed=1)
  b = event_log.generate_event_log(6, num_services=40, events=(50, 80), seed=1)
  pd.testing.assert_frame_equal(a, b)
  for _, g in a.groupby('user_id'):
    assert g['timestamp'].is_monotonic_increasing and 50 <= len(g) <= 80
    assert 2 <= g['label'].nunique() <= 36
  assert set(a['location']) <= set(event_log.LOCATIONS)


def test_local_label_space():
  space = service.local_label_space(['b', 'a', 'c', 'a', 'b', 'd'], max_classes=3)
  assert space == {'b': 0, 'a': 1, 'c': 2}        # count, then first use; 'd' beyond C


def test_service_split_is_chronological_and_local(tmp_path):
  frame = event_log.generate_event_log(10, num_services=60, events=(40, 60), seed=2)
  log = event_log.read_event_log(event_log.write_event_log(frame, str(tmp_path / 'g.csv')))
  for p in (0.8, 0.05):
    tasks = service.service_tasks(log, support_fraction=p, max_classes=5, seed=0)
    assert len(tasks.test) == 2 and len(tasks.train_ids) == 8
    for u in tasks.test:
      events = log.users[u.episode.user]
      n = len(events)
      nq = len(u.episode.query_y)
      assert nq == int(np.floor(0.2 * n + 0.5)) and u.query_start == n - nq
      ns = max(1, int(np.floor(p * n + 0.5)))
      # Support events of services beyond the C = 5 most used are left out.
      assert len(u.episode.support_y) == np.sum(u.history_labels[n - nq - ns:n - nq] >= 0)
      # Support events end where the query starts, so none is later than a query event.
      assert events.timestamps[u.query_start - 1] <= events.timestamps[u.query_start]
      assert u.episode.support_y.max() < 5 and u.episode.support_y.min() >= 0
      assert u.episode.query_y.max() < 5 and u.episode.query_y.min() >= -1
      assert u.episode.support_x.shape[1] == tasks.encoder.local_dim
      # 'last' is the previous event's local label (slot C = none / outside the space).
      last = u.query_cat.columns['last']
      prev = u.history_labels[u.query_start - 1:-1]
      np.testing.assert_array_equal(last, np.where(prev < 0, 5, prev))


def test_movielens_as_genre_events(tmp_path):
  from tests.recommendation import ml100k_files
  from tff_meta.data.movielens import GENRES, load_movielens
  from tff_meta.recommendation import config, service_task
  folder = ml100k_files.write(tmp_path / 'ml', num_users=5, num_items=50)
  log = service_task.load_log(config.from_dict({'task': 'service', 'data_path': folder}))
  ds = load_movielens(folder)
  assert sorted(log.users) == sorted(ds.clients) and log.context_columns == ()
  user = ds.clients['2']
  np.testing.assert_array_equal(log.users['2'].timestamps, user.features['timestamp'])
  first = [GENRES[int(np.flatnonzero(g)[0])] for g in user.features['genres']]
  assert list(log.users['2'].labels) == first
  tasks = service.service_tasks(log, support_fraction=0.8, seed=0)
  assert tasks.encoder.local_dim == 40 + 1 + 24 + 7
