"""Tests for tff_native's CIFAR-100 loader.

The sqlite file is written here with TFF's own writer
(`tff.simulation.datasets.save_to_sql_client_data`, `sql_client_data.py`) in
the feature format of TFF's download (`cifar100.sqlite`: int64 `image`
[32, 32, 3], `label`, `coarse_label`), and the loader's arrays are compared
with what TFF's `load_data(cache_dir=...)` reads from the same file.
"""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.data.sql_client_data import check_missing_sqlite_error, write_sql_client_data
from tff_meta.data import DATASETS, load_dataset
from tff_meta.data import tff_native
from tff_meta.data.types import DataError


def _cifar_client(rng, n):
  return collections.OrderedDict(
      coarse_label=rng.integers(0, 20, n).astype(np.int64),
      image=rng.integers(0, 256, (n, 32, 32, 3)).astype(np.uint8),
      label=rng.integers(0, 100, n).astype(np.int64))


CIFAR_TRAIN_IDS = ('0', '1', '2', '10')  # sorted as strings: 0, 1, 10, 2
CIFAR_TEST_IDS = ('0', '1')


@pytest.fixture(scope='module')
def cifar_dir(tmp_path_factory):
  folder = tmp_path_factory.mktemp('tff_cifar')
  rng = np.random.default_rng(0)
  write_sql_client_data(str(folder / tff_native.CIFAR100_FILE), {
      'train': {cid: _cifar_client(rng, 3 + i)
                for i, cid in enumerate(CIFAR_TRAIN_IDS)},
      'test': {cid: _cifar_client(rng, 2 + i)
               for i, cid in enumerate(CIFAR_TEST_IDS)},
  })
  return str(folder)


@pytest.mark.parametrize('split', ['train', 'test'])
def test_cifar100_equals_tff_load_data(cifar_dir, split):
  train, test = tff.simulation.datasets.cifar100.load_data(cache_dir=cifar_dir)
  reference = {'train': train, 'test': test}[split]
  ds = tff_native.load_tff_cifar100(cifar_dir, split=split)
  assert ds.name == 'tff_cifar100' and ds.num_classes == 100
  assert ds.element_shape == (32, 32, 3)
  assert list(ds.clients) == reference.client_ids
  for cid in reference.client_ids:
    rows = list(reference.create_tf_dataset_for_client(cid).as_numpy_iterator())
    got = ds.clients[cid]
    assert got.x.dtype == np.float32 and got.y.dtype == np.int32
    assert got.x.shape == (len(rows), 32, 32, 3)
    images = np.stack([r['image'] for r in rows])
    assert images.dtype == np.uint8
    np.testing.assert_array_equal(got.x, images.astype(np.float32) / 255)
    np.testing.assert_array_equal(got.y, [r['label'] for r in rows])
    np.testing.assert_array_equal(ds.extras['coarse_labels'][cid],
                                  [r['coarse_label'] for r in rows])
  x = np.concatenate([c.x for c in ds.clients.values()])
  assert x.min() >= 0.0 and x.max() <= 1.0


def test_cifar100_all_coarse_and_max_clients(cifar_dir):
  ds = tff_native.load_tff_cifar100(cifar_dir, label='coarse')
  assert ds.num_classes == 20
  assert list(ds.clients) == ['0', '1', '10', '2', 'test/0', 'test/1']
  assert [len(c) for c in ds.clients.values()] == [3, 4, 6, 5, 2, 3]
  fine = tff_native.load_tff_cifar100(cifar_dir)
  for cid, c in ds.clients.items():
    np.testing.assert_array_equal(c.x, fine.clients[cid].x)
    np.testing.assert_array_equal(c.y, fine.extras['coarse_labels'][cid])
    np.testing.assert_array_equal(ds.extras['fine_labels'][cid],
                                  fine.clients[cid].y)
  test = tff_native.load_tff_cifar100(cifar_dir, split='test')
  np.testing.assert_array_equal(fine.clients['test/1'].x, test.clients['1'].x)
  assert list(tff_native.load_tff_cifar100(cifar_dir, max_clients=2).clients) \
      == ['0', '1']
  assert list(tff_native.load_tff_cifar100(cifar_dir, max_clients=5).clients) \
      == ['0', '1', '10', '2', 'test/0']
  with pytest.raises(DataError, match='label'):
    tff_native.load_tff_cifar100(cifar_dir, label='superclass')
  with pytest.raises(DataError, match='split'):
    tff_native.load_tff_cifar100(cifar_dir, split='heldout')


def test_missing_sqlite_names_file_folder_and_fix(tmp_path):
  check_missing_sqlite_error(tff_native.load_tff_cifar100, tmp_path / 'cache', 'cifar100.sqlite')


def test_registered_name(cifar_dir):
  ds = load_dataset('tff_cifar100', cache_dir=cifar_dir, split='train',
                    max_clients=1)
  assert ds.name == 'tff_cifar100' and list(ds.clients) == ['0']
  # 'cifar100' stays the centralized CIFAR-100 split into clients.
  assert DATASETS.get('cifar100').resolve().keywords == {'name': 'cifar100'}
