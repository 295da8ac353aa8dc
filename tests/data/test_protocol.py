"""Tests for tff_meta.data.protocol (FedMeta: filter, 80/10/10 clients, support/query)."""

from unittest import mock

import numpy as np
import pytest

from tff_meta.data import load_dataset
from tff_meta.data import protocol
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset
from tff_meta.core.registry import UnknownNameError


def _dataset(sizes, name='toy'):
  """Client i has sizes[i] examples; x[:, 0] is a globally unique example id."""
  clients, start = {}, 0
  for i, n in enumerate(sizes):
    ids = np.arange(start, start + n, dtype=np.float32)
    clients[f'c{i:02d}'] = ClientArrays(np.stack([ids, ids], axis=1),
                                        (np.arange(n) % 3).astype(np.int32))
    start += n
  return FederatedDataset(name=name, clients=clients, num_classes=3, element_shape=(2,))


def _ids(split):
  return {c.client_id for c in split}


def test_client_split_80_10_10_disjoint_and_complete():
  ds = _dataset([12] * 50)
  data = protocol.prepare(ds, support_fraction=0.2, seed=0)
  train, val, test = _ids(data.train), _ids(data.validation), _ids(data.test)
  assert (len(train), len(val), len(test)) == (40, 5, 5)
  assert not train & val and not train & test and not val & test
  assert train | val | test == set(ds.clients)
  assert data.num_filtered == 0 and '40 train / 5 validation / 5 test' in data.summary()


def test_support_query_disjoint_and_cover_each_client():
  ds = _dataset([10, 25, 7, 40, 13, 9, 30, 11, 12, 20])
  data = protocol.prepare(ds, support_fraction=0.3, seed=1)
  for c in data.train + data.validation + data.test:
    s, q = set(c.support.x[:, 0].tolist()), set(c.query.x[:, 0].tolist())
    assert not s & q
    assert s | q == set(ds.clients[c.client_id].x[:, 0].tolist())
    n = len(ds.clients[c.client_id])
    assert len(s) == round(0.3 * n)   # never capped: an empty split is refused


def test_same_seed_same_split_different_seed_different():
  ds = _dataset([15] * 30)
  key = lambda d: ([c.client_id for c in d.train], [c.client_id for c in d.test],
                   [c.support.x[:, 0].tolist() for c in d.train])
  a = protocol.prepare(ds, support_fraction=0.5, seed=4)
  b = protocol.prepare(ds, support_fraction=0.5, seed=4)
  c = protocol.prepare(ds, support_fraction=0.5, seed=5)
  assert key(a) == key(b)
  assert key(a)[0] != key(c)[0]
  sq = lambda d: {x.client_id: x.support.x[:, 0].tolist() for x in d.train + d.validation + d.test}
  assert sq(a) != sq(c)


def test_min_samples_filter_counts():
  ds = _dataset([3, 30, 9, 30, 10, 30, 30, 30, 30, 30, 30, 30])
  data = protocol.prepare(ds, support_fraction=0.2, min_samples=10, seed=0)
  kept = _ids(data.train) | _ids(data.validation) | _ids(data.test)
  assert data.num_filtered == 2 and kept == set(ds.clients) - {'c00', 'c02'}


def test_empty_client_dropped_with_warning_and_none_left_raises():
  ds = _dataset([0] + [20] * 10)
  with mock.patch.object(protocol.logging, 'warning') as warning:
    data = protocol.prepare(ds, support_fraction=0.2, seed=0)
  assert data.num_filtered == 1
  assert 'c00' not in _ids(data.train) | _ids(data.validation) | _ids(data.test)
  assert warning.call_count == 1 and 'c00' in warning.call_args[0][1:]
  with pytest.raises(DataError, match='toy: no client has >= 25 samples'):
    protocol.prepare(_dataset([0, 5, 24]), support_fraction=0.2, min_samples=25)


@pytest.mark.parametrize('p', [0.0, 1.0, 1.2, -0.1])
def test_support_fraction_outside_unit_interval_raises_value_error(p):
  with pytest.raises(ValueError, match='support_fraction'):
    protocol.prepare(_dataset([10] * 10), support_fraction=p)


def test_digits_protocol_end_to_end():
  ds = load_dataset('digits', num_clients=50, seed=0)
  data = protocol.prepare(ds, support_fraction=0.2, seed=0)
  assert len(data.train) == 40 and len(data.validation) == len(data.test) == 5
  assert sum(len(c) for c in data.train + data.validation + data.test) == 1797


def test_unknown_source_name_lists_valid_names():
  with pytest.raises(UnknownNameError) as e:
    load_dataset('nope')
  msg = str(e.value)
  for name in ('digits', 'emnist', 'leaf_femnist', 'mnist', 'fashion_mnist', 'cifar10',
               'cifar100'):
    assert name in msg
  with pytest.raises(UnknownNameError, match="Did you mean 'mnist'"):
    load_dataset('mnsit')
  with pytest.raises(ValueError, match="Unknown option.*'bogus'"):
    load_dataset('digits', bogus=1)


def test_labels_out_of_range_raise():
  with pytest.raises(DataError, match=r"client 'a': example 1 has label 3, outside the task's classes \[0, 3\)"):
    FederatedDataset('bad', {'a': ClientArrays(np.zeros((2, 1)), np.array([0, 3]))}, 3, (1,))


def test_known_test_fraction_holds_out_a_local_test_set_training_never_sees():
  data = protocol.prepare(_dataset([40] * 10), support_fraction=0.5, client_split=(1.0, 0.0, 0.0),
                          known_test_fraction=0.25, seed=3)
  assert len(data.train) == 10 and not data.test
  for c in data.train:
    held = set(c.holdout.x[:, 0])
    train = set(c.all.x[:, 0])
    assert len(held) == 10 and len(train) == 30 and not held & train
    known = c.known_split()
    assert set(known.support.x[:, 0]) == train and set(known.query.x[:, 0]) == held
  again = protocol.prepare(_dataset([40] * 10), support_fraction=0.5,
                           client_split=(1.0, 0.0, 0.0), known_test_fraction=0.25, seed=3)
  assert np.array_equal(again.train[0].holdout.x, data.train[0].holdout.x)


def test_no_test_clients_needs_known_clients():
  with pytest.raises(DataError, match='known_test_fraction > 0'):
    protocol.prepare(_dataset([40] * 10), support_fraction=0.5, client_split=(1.0, 0.0, 0.0))


def _example_ids(arrays):
  return arrays.x[:, 0].tolist()


@pytest.mark.parametrize('known_test_fraction', [0.0, 0.25])
def test_resampled_split_keeps_the_fraction_disjoint_and_covers_the_training_data(
    known_test_fraction):
  """FedMeta Alg. 1 line 13: a fresh D_S / D_Q each round, from the client's training data."""
  ds = _dataset([10, 25, 7, 40, 13, 9, 30, 11, 12, 20] * 2)
  data = protocol.prepare(ds, support_fraction=0.3, seed=3,
                          known_test_fraction=known_test_fraction)
  for c in data.train:
    training = set(_example_ids(c.support)) | set(_example_ids(c.query))
    n = len(training)
    for round_num in (1, 2, 7):
      r = protocol.resample_split(c, 3, round_num)
      s, q = _example_ids(r.support), _example_ids(r.query)
      assert not set(s) & set(q) and len(set(s)) == len(s) and len(set(q)) == len(q)
      assert set(s) | set(q) == training
      assert len(s) == round(0.3 * n)   # never capped: an empty split is refused
      labels = dict(zip(_example_ids(c.all), c.all.y.tolist()))   # labels travel with x
      assert r.support.y.tolist() == [labels[i] for i in s]
      if known_test_fraction:
        assert _example_ids(r.holdout) == _example_ids(c.holdout)
        assert not set(_example_ids(r.holdout)) & training
      else:
        assert r.holdout is None


def test_resampled_split_depends_on_seed_round_and_client_only():
  ids = np.arange(30, dtype=np.float32)
  arrays = ClientArrays(np.stack([ids, ids], axis=1), np.zeros(30, np.int32))
  a = protocol.support_query_split(arrays, 0.2, 0, 'a')
  b = protocol.support_query_split(arrays, 0.2, 0, 'b')   # same data, another client
  support = lambda split, seed, r: _example_ids(protocol.resample_split(split, seed, r).support)
  assert support(a, 5, 4) == support(a, 5, 4)
  assert len({tuple(support(a, 5, r)) for r in range(1, 6)}) == 5   # new each round
  assert support(a, 5, 4) != support(a, 6, 4)
  assert support(a, 5, 4) != support(b, 5, 4)


def test_a_support_fraction_that_leaves_a_client_empty_is_refused():
  """Not capped at 1 support example: the error names the numbers and the min_samples that
  drops those clients."""
  ds = _dataset([2, 4, 10, 12, 15, 20, 8, 9, 30, 11])
  with pytest.raises(DataError, match=r'support_fraction = 0.2 leaves 1 of 10 clients with an '
                     r'empty split \(clients of 2 examples; e.g. 2: round\(0.2 \* 2\) = 0 '
                     r'support examples\); set min_samples to 3 \(it is 2\)'):
    protocol.prepare(ds, support_fraction=0.2)
  assert len(protocol.prepare(ds, support_fraction=0.2, min_samples=3).train) == 7
  with pytest.raises(DataError, match='support_fraction = 0.9 leaves 1 of 9 clients'):
    protocol.prepare(ds, support_fraction=0.9, min_samples=3)   # 4: round(3.6) = 4, no query
  with pytest.raises(DataError, match='known_test_fraction = 0.1 leaves 1 of 9 clients'):
    protocol.prepare(ds, support_fraction=0.5, min_samples=3, known_test_fraction=0.1)
  # 4 and 5 hold out round(0.4) = round(0.5) = 0 examples.
  assert protocol.empty_split_sizes([4, 5, 12], 0.5, known_test_fraction=0.1) == [4, 5]
  with pytest.raises(DataError, match="Client 'c' has 3 examples: support_fraction = 0.1 gives it "
                     '0 and 3'):
    protocol.support_query_split(ds.clients['c02'].take(np.arange(3)), 0.1, 0, 'c')


def test_draw_clients_draws_that_many_of_the_kept_clients_by_seed():
  # 40 clients, 4 of them under min_samples: a file with more writers than the paper's.
  ds = _dataset([3] * 4 + [12] * 36)
  every = lambda d: _ids(d.train) | _ids(d.validation) | _ids(d.test)
  a = protocol.prepare(ds, support_fraction=0.2, min_samples=10, seed=3, draw_clients_count=20)
  b = protocol.prepare(ds, support_fraction=0.2, min_samples=10, seed=3, draw_clients_count=20)
  c = protocol.prepare(ds, support_fraction=0.2, min_samples=10, seed=4, draw_clients_count=20)
  assert len(every(a)) == 20 and every(a) == every(b) and every(a) != every(c)
  assert not every(a) & {'c00', 'c01', 'c02', 'c03'}   # drawn from the kept clients only
  assert (len(a.train), len(a.validation), len(a.test)) == (16, 2, 2)
  assert a.num_filtered == 4 and a.num_not_drawn == 16
  assert '16 more not drawn (draw_clients)' in a.summary()
  # no more clients than draw_clients: all of them, as without the option
  d = protocol.prepare(ds, support_fraction=0.2, min_samples=10, seed=3, draw_clients_count=36)
  e = protocol.prepare(ds, support_fraction=0.2, min_samples=10, seed=3)
  assert every(d) == every(e) and d.num_not_drawn == 0
  assert protocol.draw_clients(['b', 'a'], 0, 1) == ['a', 'b']
