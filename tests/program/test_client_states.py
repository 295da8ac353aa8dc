"""ClientStateStore: per-client state by id, bounded cache, exact restore to a checkpoint."""

import collections

import numpy as np

from tff_meta.program.client_states import ClientStateStore


def _initial():
  return collections.OrderedDict(visits=np.float32(0), w=[np.zeros(3, np.float32)])


def _state(v):
  return collections.OrderedDict(visits=np.float32(v), w=[np.full(3, v, np.float32)])


def test_new_clients_get_the_initial_state(tmp_path):
  store = ClientStateStore(str(tmp_path), _initial())
  (a,) = store.get(['a'])
  assert a['visits'] == 0 and not a['w'][0].any() and store.num_clients == 0


def test_states_are_kept_per_client(tmp_path):
  store = ClientStateStore(str(tmp_path), _initial())
  store.put(['a', 'b'], [_state(1), _state(2)], round_num=1)
  a, b, c = store.get(['a', 'b', 'c'])
  assert a['w'][0][0] == 1 and b['w'][0][0] == 2 and c['visits'] == 0


def test_small_cache_spills_to_disk_and_reads_back(tmp_path):
  store = ClientStateStore(str(tmp_path), _initial(), cache_mb=1e-9)   # room for one state
  store.put([f'c{i}' for i in range(5)], [_state(i) for i in range(5)], round_num=3)
  on_disk = ClientStateStore(str(tmp_path), _initial())
  assert on_disk.num_clients == 4   # c4 is still only in the cache
  assert [s['w'][0][0] for s in store.get([f'c{i}' for i in range(5)])] == [0, 1, 2, 3, 4]


def test_restore_returns_exactly_the_checkpointed_states(tmp_path):
  store = ClientStateStore(str(tmp_path), _initial(), cache_mb=1e-9)
  store.put(['a'], [_state(1)], round_num=1)
  store.put(['b'], [_state(2)], round_num=2)
  store.flush(2)                                   # checkpoint at round 2
  store.put(['a'], [_state(3)], round_num=3)      # then a is evicted to disk at round 3...
  store.put(['c'], [_state(4)], round_num=4)      # ...and c is new after the checkpoint
  store.put(['d'], [_state(5)], round_num=4)
  resumed = ClientStateStore(str(tmp_path), _initial())
  resumed.restore(2)
  a, b, c = resumed.get(['a', 'b', 'c'])
  assert a['w'][0][0] == 1 and b['w'][0][0] == 2 and c['visits'] == 0
  assert resumed.num_clients == 2


def test_prune_keeps_what_a_kept_checkpoint_needs(tmp_path):
  store = ClientStateStore(str(tmp_path), _initial())
  for r in (1, 2, 3):
    store.put(['a'], [_state(r)], round_num=r)
    store.flush(r)
  store.prune(2)
  store.restore(2)
  assert store.get(['a'])[0]['w'][0][0] == 2
