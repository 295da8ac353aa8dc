"""Tests for tff_meta.data.images on IDX / CIFAR pickle files written here (and Debian's files)."""

import dataclasses
import gzip
import os
import pickle
import struct

import numpy as np
import pytest

from tff_meta.data import image_files, images
from tff_meta.data import load_dataset
from tff_meta.data.types import DataError

DEBIAN_FASHION = '/usr/share/datasets/fashion-mnist'


def _idx_bytes(array: np.ndarray) -> bytes:
  code = {np.dtype(np.uint8): 0x08, np.dtype('>i4'): 0x0C}[array.dtype]
  header = bytes([0, 0, code, array.ndim]) + struct.pack(f'>{array.ndim}I', *array.shape)
  return header + array.tobytes()


def _write(path, data: bytes, gz: bool):
  if gz:
    path = path.with_name(path.name + '.gz')
    data = gzip.compress(data)
  path.write_bytes(data)
  return path


def _mnist_like(n, seed, num_classes=10):
  rng = np.random.default_rng(seed)
  x = rng.integers(0, 256, size=(n, 4, 5), dtype=np.uint8)
  y = np.repeat(np.arange(num_classes, dtype=np.uint8), n // num_classes)
  return x, rng.permutation(y)


def write_idx_dataset(folder, n_train=60, n_test=20, gz=False):
  folder.mkdir(parents=True, exist_ok=True)
  arrays = {}
  for split, n, seed in (('train', n_train, 0), ('test', n_test, 1)):
    x, y = _mnist_like(n, seed)
    image_name, label_name = images.IDX_FILES[split]
    _write(folder / image_name, _idx_bytes(x), gz)
    _write(folder / label_name, _idx_bytes(y), gz)
    arrays[split] = (x, y)
  return arrays


@pytest.mark.parametrize('gz', [False, True])
def test_idx_folder_values_splits_and_counts(tmp_path, gz):
  arrays = write_idx_dataset(tmp_path, gz=gz)
  train = images.load_centralized('mnist', str(tmp_path), split='train')
  assert train.x.shape == (60, 4, 5) and train.x.dtype == np.float32
  np.testing.assert_allclose(train.x, arrays['train'][0] / 255.0)
  np.testing.assert_array_equal(train.y, arrays['train'][1])
  assert train.y.dtype == np.int32
  both = images.load_centralized('mnist', str(tmp_path), split='all')
  assert len(both.y) == 80
  np.testing.assert_array_equal(both.y[60:], arrays['test'][1])
  assert len(images.load_centralized('mnist', str(tmp_path), split='test').y) == 20
  assert len(images.load_centralized('mnist', str(tmp_path), max_examples=7).y) == 7


def test_label_shards_clients_hold_exactly_k_classes_and_are_seeded(tmp_path):
  write_idx_dataset(tmp_path, n_train=200, n_test=20)
  ds = load_dataset('mnist', data_dir=str(tmp_path), num_clients=10, labels_per_client=2,
                    split='train', seed=0)
  assert ds.name == 'mnist' and ds.num_classes == 10 and ds.element_shape == (4, 5)
  assert len(ds.clients) == 10 and ds.num_examples == 200
  assert all(len(np.unique(c.y)) == 2 and len(c) == 20 for c in ds.clients.values())
  again = load_dataset('mnist', data_dir=str(tmp_path), num_clients=10, split='train', seed=0)
  other = load_dataset('mnist', data_dir=str(tmp_path), num_clients=10, split='train', seed=1)
  ys = lambda d: [c.y.tolist() for c in d.clients.values()]
  assert ys(ds) == ys(again) and ys(ds) != ys(other)
  iid = load_dataset('fashion_mnist', data_dir=str(tmp_path), partition='iid', num_clients=4)
  assert iid.num_examples == 220 and {len(c) for c in iid.clients.values()} == {55}
  dirichlet = load_dataset('mnist', data_dir=str(tmp_path), partition='dirichlet', alpha=0.3,
                           min_size=5, num_clients=5)
  assert dirichlet.num_examples == 220


def test_keras_cache_is_searched_when_no_data_dir(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))
  monkeypatch.delenv('KERAS_HOME', raising=False)
  cache = tmp_path / '.keras' / 'datasets'
  cache.mkdir(parents=True)
  x, y = _mnist_like(30, 0)
  np.savez(cache / 'mnist.npz', x_train=x, y_train=y, x_test=x[:10], y_test=y[:10])
  data = images.load_centralized('mnist', split='all')
  assert len(data.y) == 40 and data.files == [str(cache / 'mnist.npz')]
  write_idx_dataset(cache / 'fashion-mnist')
  assert images.SOURCES['fashion_mnist'].default_dirs == (DEBIAN_FASHION,)  # searched first
  monkeypatch.setitem(images.SOURCES, 'fashion_mnist', dataclasses.replace(
      images.SOURCES['fashion_mnist'], default_dirs=()))
  data = images.load_centralized('fashion_mnist')
  assert data.files[0] == str(cache / 'fashion-mnist' / 'train-images-idx3-ubyte')


def test_missing_files_name_expected_files_and_download_nothing(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))
  monkeypatch.delenv('KERAS_HOME', raising=False)
  with pytest.raises(DataError) as e:
    images.load_centralized('cifar10', str(tmp_path))
  assert 'data_batch_1' in str(e.value) and str(tmp_path) in str(e.value)
  home_cache = os.path.join(str(tmp_path), '.keras', 'datasets')
  assert images.keras_cache_dirs() == [home_cache, '/tmp/.keras/datasets']
  monkeypatch.setattr(images, 'keras_cache_dirs', lambda: [home_cache])  # ignore this machine's
  with pytest.raises(DataError) as e:
    images.load_centralized('mnist', split='train')
  msg = str(e.value)
  assert 'train-images-idx3-ubyte' in msg and os.path.join(str(tmp_path), '.keras') in msg
  assert not os.path.exists(tmp_path / '.keras')
  with pytest.raises(DataError, match='not a folder'):
    images.load_centralized('mnist', str(tmp_path / 'nowhere'))
  with pytest.raises(DataError, match='svhn'):
    images.load_centralized('svhn')


def test_malformed_idx_names_the_file(tmp_path):
  write_idx_dataset(tmp_path)
  labels = tmp_path / 'train-labels-idx1-ubyte'
  good = labels.read_bytes()
  labels.write_bytes(b'\x12\x34' + good[2:])
  with pytest.raises(DataError, match='train-labels-idx1-ubyte.*magic'):
    images.load_centralized('mnist', str(tmp_path), split='train')
  labels.write_bytes(good[:-5])
  with pytest.raises(DataError, match='train-labels-idx1-ubyte.*truncated'):
    images.load_centralized('mnist', str(tmp_path), split='train')
  labels.write_bytes(good[:6])
  with pytest.raises(DataError, match='truncated IDX header'):
    image_files.read_idx(str(labels))
  bad = good[:-1] + bytes([10])  # label 10 is out of [0, 10)
  labels.write_bytes(bad)
  with pytest.raises(DataError, match=r'train-labels-idx1-ubyte: label 10 .*\[0, 10\)'):
    images.load_centralized('mnist', str(tmp_path), split='train')
  labels.write_bytes(_idx_bytes(np.zeros(59, np.uint8)))
  with pytest.raises(DataError, match='60 images but .* 59 labels'):
    images.load_centralized('mnist', str(tmp_path), split='train')
  images_file = tmp_path / 't10k-images-idx3-ubyte'
  images_file.unlink()
  _write(images_file, gzip.compress(_idx_bytes(_mnist_like(20, 1)[0]))[:-8], gz=False)
  with pytest.raises(DataError, match='t10k-images-idx3-ubyte.*gzip'):
    images.load_centralized('mnist', str(tmp_path), split='test')


def _cifar_batch(n, num_classes, seed, label_key):
  rng = np.random.default_rng(seed)
  data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
  labels = rng.integers(0, num_classes, size=n).tolist()
  return {b'batch_label': b'x', b'data': data, label_key.encode(): labels}


def _pickle(path, obj):
  path.write_bytes(pickle.dumps(obj, protocol=2))


def test_cifar10_batches(tmp_path):
  batches = [_cifar_batch(8, 10, s, 'labels') for s in range(3)]
  _pickle(tmp_path / 'data_batch_1', batches[0])
  _pickle(tmp_path / 'data_batch_2', batches[1])
  _pickle(tmp_path / 'test_batch', batches[2])
  data = images.load_centralized('cifar10', str(tmp_path))
  assert data.x.shape == (24, 32, 32, 3) and data.num_classes == 10
  np.testing.assert_array_equal(data.y, sum((b[b'labels'] for b in batches), []))
  row = batches[0][b'data'][3]
  # Rows are the red, then green, then blue 32x32 planes.
  assert data.x[3, 0, 0, 0] == pytest.approx(row[0] / 255)
  assert data.x[3, 0, 1, 1] == pytest.approx(row[1024 + 1] / 255)
  assert data.x[3, 1, 0, 2] == pytest.approx(row[2048 + 32] / 255)
  train = images.load_centralized('cifar10', str(tmp_path), split='train')
  assert train.files == [str(tmp_path / 'data_batch_1'), str(tmp_path / 'data_batch_2')]
  ds = load_dataset('cifar10', data_dir=str(tmp_path), partition='iid', num_clients=3)
  assert ds.element_shape == (32, 32, 3) and ds.num_examples == 24


def test_cifar100_fine_labels_keras_layout_and_bad_files(tmp_path):
  folder = tmp_path / 'cifar-100-python'
  folder.mkdir()
  train = _cifar_batch(10, 100, 0, 'fine_labels')
  train[b'coarse_labels'] = [0] * 10
  _pickle(folder / 'train', train)
  _pickle(folder / 'test', _cifar_batch(4, 100, 1, 'fine_labels'))
  data = images.load_centralized('cifar100', str(tmp_path))  # parent of Keras' subfolder
  assert data.num_classes == 100 and len(data.y) == 14
  np.testing.assert_array_equal(data.y[:10], train[b'fine_labels'])
  bad = dict(train)
  bad[b'fine_labels'] = [100] + train[b'fine_labels'][1:]
  _pickle(folder / 'train', bad)
  with pytest.raises(DataError, match=r'train: label 100 .*\[0, 100\)'):
    images.load_centralized('cifar100', str(folder))
  _pickle(folder / 'train', {b'data': train[b'data']})
  with pytest.raises(DataError, match="train: CIFAR batch has no key 'fine_labels'"):
    images.load_centralized('cifar100', str(folder))
  (folder / 'train').write_bytes(b'garbage')
  with pytest.raises(DataError, match='train: not a readable CIFAR'):
    images.load_centralized('cifar100', str(folder))
  (folder / 'train').write_bytes(pickle.dumps(os.system))
  with pytest.raises(DataError, match='not allowed'):
    images.load_centralized('cifar100', str(folder))


@pytest.mark.skipif(not os.path.isdir(DEBIAN_FASHION),
                    reason='Debian package dataset-fashion-mnist is not installed')
def test_real_fashion_mnist_from_debian_package():
  data = images.load_centralized('fashion_mnist', split='test')
  assert data.x.shape == (10000, 28, 28)
  assert np.bincount(data.y).tolist() == [1000] * 10
  assert 0.0 <= data.x.min() and data.x.max() == 1.0
  assert data.files[0].startswith(DEBIAN_FASHION)
  ds = load_dataset('fashion_mnist', split='test', num_clients=50, labels_per_client=2)
  assert {len(np.unique(c.y)) for c in ds.clients.values()} == {2}
  assert {len(c) for c in ds.clients.values()} == {200}
