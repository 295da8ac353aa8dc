"""ClientStateStore: per-client state by id, bounded cache, exact restore to a checkpoint."""

import collections
import os

import numpy as np
import pytest

from tff_meta.classification.client_states import ClientStateError, ClientStateStore


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
  folders = [d for d in os.listdir(tmp_path) if os.path.isdir(tmp_path / d)]
  assert len(folders) == 4   # c4 is still only in the cache
  assert [s['w'][0][0] for s in store.get([f'c{i}' for i in range(5)])] == [0, 1, 2, 3, 4]
  store.flush(3)             # at a checkpoint: every state and the id index (atomically)
  assert ClientStateStore(str(tmp_path), _initial()).num_clients == 5


def test_restore_forgets_states_spilled_after_the_checkpoint_of_unindexed_clients(tmp_path):
  store = ClientStateStore(str(tmp_path), _initial(), cache_mb=1e-9)
  store.put(['a'], [_state(1)], round_num=1)
  store.flush(1)                                  # checkpoint at round 1: index lists a
  store.put(['b', 'c'], [_state(2), _state(3)], round_num=2)   # b spills to disk, unindexed
  resumed = ClientStateStore(str(tmp_path), _initial())        # killed; resume at round 1
  resumed.restore(1)
  resumed.put(['b'], [_state(5)], round_num=1)   # hypothetically rewritten at an earlier round
  a, b = resumed.get(['a', 'b'])
  assert a['w'][0][0] == 1 and b['w'][0][0] == 5 and resumed.num_clients == 2


@pytest.mark.parametrize('damage', [b'', b'PK\x03\x04 torn', b'garbage' * 20])
def test_damaged_state_file_is_a_clear_error(tmp_path, damage):
  store = ClientStateStore(str(tmp_path), _initial(), cache_mb=1e-9)
  store.put(['a', 'b'], [_state(1), _state(2)], round_num=1)
  store.flush(1)
  path = os.path.join(store._client_dir('a'), '000000001.npz')  # pylint: disable=protected-access
  with open(path, 'wb') as f:
    f.write(damage)
  with pytest.raises(ClientStateError, match='cannot be read'):
    ClientStateStore(str(tmp_path), _initial()).get(['a'])


def test_state_of_another_algorithm_is_a_clear_error(tmp_path):
  store = ClientStateStore(str(tmp_path), _initial())
  store.put(['a'], [_state(1)], 1)
  store.flush(1)
  other = collections.OrderedDict(w=[np.zeros(5, np.float32)])
  with pytest.raises(ClientStateError, match='does not fit'):
    ClientStateStore(str(tmp_path), other).get(['a'])


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


def test_a_state_file_without_read_permission_is_not_called_damaged(tmp_path, monkeypatch):
  """The machine's refusal reaches cli.guard (which names the permission), not 'damaged'."""
  store = ClientStateStore(str(tmp_path), _initial(), cache_mb=1e-9)
  store.put(['a', 'b'], [_state(1), _state(2)], round_num=1)
  store.flush(1)

  def refused(path, *args, **kwargs):
    raise PermissionError(13, 'Permission denied', str(path))

  monkeypatch.setattr(np, 'load', refused)
  with pytest.raises(PermissionError):
    ClientStateStore(str(tmp_path), _initial()).get(['a'])
