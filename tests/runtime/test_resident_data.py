"""Client data kept on the worker (`runtime.resident_data`): the groups it rebuilds are the
groups `grouped.pack_groups` sends, row for row, and rounds through it equal rounds without it."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.runtime import grouped
from tff_meta.data import client_data
from tff_meta.runtime import resident_data
from tff_meta.runtime.grouped_rounds import GroupedRounds
from tff_meta.runtime.resident import ResidentRounds

SPEC = collections.OrderedDict(x=tf.TensorSpec([None, 2], tf.float32),
                               y=tf.TensorSpec([None], tf.int32),
                               w=tf.TensorSpec([3], tf.float32))   # fixed shape: stacked


def _client(rng, n):
  return collections.OrderedDict(x=rng.normal(size=(n, 2)).astype(np.float32),
                                 y=rng.integers(0, 9, n).astype(np.int32),
                                 w=rng.normal(size=3).astype(np.float32))


def _gather(pool, group):
  """`resident_data.gather_group` in numpy."""
  data = collections.OrderedDict()
  for k, rows in pool.items():
    whole = np.concatenate([rows, group['fresh'][k]])
    data[k] = whole[group['positions'][k]]
  return collections.OrderedDict(data=data, rows=group['rows'])


def _assert_groups_equal(a, b):
  for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
    np.testing.assert_array_equal(x, y)
    assert x.dtype == y.dtype


def test_plan_rebuilds_packed_groups_and_pools_recurring_arrays():
  rng = np.random.default_rng(0)
  clients = [_client(rng, n) for n in (3, 5, 2, 4, 6)]
  data_pool = resident_data.DataPool(SPEC)
  worker_pool = None
  rounds = [[0, 1, 2, 3],            # all new: the empty pool is sent, every row fresh
            [1, 2, 3, 4],            # 1-3 seen before: pooled (the pool is sent again)
            [3, 2, 1, _client(rng, 7)],   # a new client: fresh; nothing sent
            [0, 4, 3]]               # 0 and 4 recur: a quarter or more of the pool, so sent
  sent = []
  for picks in rounds:
    batch = [clients[p] if isinstance(p, int) else p for p in picks]
    upload, positions = data_pool.plan(grouped.split_groups(batch, 2))
    sent.append(upload is not None)
    worker_pool = upload if upload is not None else worker_pool
    rebuilt = [_gather(worker_pool, g) for g in positions]
    _assert_groups_equal(rebuilt, grouped.pack_groups(batch, SPEC, 2))
  assert sent == [True, True, False, True]
  assert len(worker_pool['x']) == sum(len(clients[i]['x']) for i in range(5))
  # Only the fresh rows travel once the clients are pooled.
  _, positions = data_pool.plan(grouped.split_groups([clients[i] for i in (4, 0)], 2))
  assert [len(g['fresh']['x']) for g in positions] == [0]


def test_plan_pools_by_content_never_values_that_change_and_stops_at_max_bytes(monkeypatch):
  monkeypatch.setattr(resident_data, 'KEY_SAMPLES', 64)
  rng = np.random.default_rng(1)
  base = [_client(rng, 100) for _ in range(3)]   # keys sample every 3rd value of x
  copies = resident_data.DataPool(SPEC)
  for r in range(3):   # new arrays, same values (a client read on demand): pooled
    batch = [collections.OrderedDict((k, v.copy()) for k, v in c.items()) for c in base]
    upload, positions = copies.plan([batch])
    assert (upload is not None) == (r < 2)
    assert len(positions[0]['fresh']['x']) == (300 if r == 0 else 0)   # pooled from round 2
    _assert_groups_equal([_gather(upload or pooled, positions[0])],
                         grouped.pack_groups(batch, SPEC, 3))
    pooled = upload or pooled
  changed = [collections.OrderedDict((k, v.copy()) for k, v in c.items()) for c in base]
  changed[1]['x'].reshape(-1)[1] += 1.0   # a value the key does not sample differs
  _, positions = copies.plan([changed])
  assert len(positions[0]['fresh']['x']) == 100
  _assert_groups_equal([_gather(pooled, positions[0])], grouped.pack_groups(changed, SPEC, 3))
  shuffled = resident_data.DataPool(SPEC)
  for r in range(3):   # values reordered every round (like FedAvg's shuffled data)
    batch = [collections.OrderedDict((k, rng.permutation(v)) for k, v in c.items())
             for c in base]
    upload, positions = shuffled.plan([batch])
    assert upload is None or len(upload['x']) == 0   # (a 3-value `w` may come back alike)
    assert len(positions[0]['fresh']['x']) == 300
  small = resident_data.DataPool(SPEC, max_bytes=100)
  for _ in range(3):
    upload, positions = small.plan([base])
  assert len(positions[0]['fresh']['x']) == 300   # over max_bytes: nothing pooled


def test_pooled_resident_rounds_equal_packed_rounds(tff_context):
  proc, _ = helpers.fedmeta_rounds('maml', 4)
  clients = helpers.digits_protocol().train[:6]

  def round_batch(r):   # rounds that share clients, and one with resampled (new) arrays
    picked = [clients[i] for i in client_data.sample_clients(6, 4, 0, r)]
    return client_data.round_data('episode', picked, 0, r, resample=r == 3)

  address = f'localhost:{tff_context.port}'
  results = {}
  for pooled in (False, True):
    data_pool = resident_data.DataPool(grouped.data_spec(proc)) if pooled else None
    inner = ResidentRounds(grouped.grouped_process(proc), address, 2, lambda r: r == 4, data_pool=data_pool)
    assert inner.takes_client_groups == pooled
    state = proc.initialize()
    out = []
    with GroupedRounds(proc, inner, 2) as runner:
      for r in range(1, 5):
        state, metrics, _ = runner.next(state, r, round_batch(r))
        out.append(metrics)
    results[pooled] = (state, out)
  for a, b in zip(tf.nest.flatten(results[False]), tf.nest.flatten(results[True])):
    np.testing.assert_array_equal(a, b)


def test_arrays_whose_keys_collide_are_each_pooled_and_rebuilt(monkeypatch):
  """Mostly-equal arrays (EMNIST query sets are mostly background) share a key;
  each is still pooled and each group gets its own rows back."""
  monkeypatch.setattr(resident_data, 'KEY_SAMPLES', 1)   # every x has the same key
  rng = np.random.default_rng(2)
  clients = []
  for i in range(6):
    c = _client(rng, 4)
    c['x'][:] = 0.0
    c['x'][1:, 0] = i + 1.0   # differs from the others only where the key does not look
    clients.append(c)
  data_pool = resident_data.DataPool(SPEC)
  worker_pool = None
  for r in range(3):
    upload, positions = data_pool.plan(grouped.split_groups(clients, 3))
    worker_pool = upload if upload is not None else worker_pool
    _assert_groups_equal([_gather(worker_pool, g) for g in positions],
                         grouped.pack_groups(clients, SPEC, 3))
    if r > 0:   # every client's x pooled from the second round: none travel again
      assert [len(g['fresh']['x']) for g in positions] == [0, 0]
  assert len(worker_pool['x']) == 6 * 4


def test_ranges_join_each_start_and_count():
  expected = np.concatenate([np.arange(5, 8), np.arange(0, 0), np.arange(2, 4), np.arange(9, 10)])
  got = resident_data._ranges([5, 7, 2, 9], [3, 0, 2, 1])   # pylint: disable=protected-access
  np.testing.assert_array_equal(got, expected)
  assert got.dtype == np.int32
  assert resident_data._ranges([], []).shape == (0,)   # pylint: disable=protected-access


def test_a_round_with_the_wrong_inputs_is_refused_before_the_pool_plans(tff_context):
  proc, _ = helpers.fedmeta_rounds('maml', 4)
  clients = helpers.digits_protocol().train[:2]
  data_pool = resident_data.DataPool(grouped.data_spec(proc))
  runner = ResidentRounds(grouped.grouped_process(proc), f'localhost:{tff_context.port}', 1, lambda r: False,
                          data_pool=data_pool)
  try:
    batch = [client_data.round_data('episode', clients, 0, 1)]
    with pytest.raises(ValueError, match='takes 1 argument'):
      runner.next(proc.initialize(), 1, batch, client_states=[{}])   # a stateless process
    assert not data_pool._seen   # pylint: disable=protected-access
  finally:
    runner.close()
