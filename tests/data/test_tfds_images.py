"""Tests for the TFDS source of tff_meta.data.images (tfds_images.py).

Each test makes a tiny TFDS data_dir inside tmp_path the way a user without
internet would: the original archives (IDX .gz files, CIFAR binary tar.gz,
EMNIST's gzip.zip), here written small by the test, go into
<data_dir>/downloads/manual/, and TFDS's real builders prepare and read them.
TFDS checks each original by size and SHA-256 and the MNIST builders expect
60,000 / 10,000 images, so the tests register the small files' checksums and
counts in place of the real ones (monkeypatch; nothing else of TFDS is
replaced). No network, no file outside tmp_path.
"""

import gzip
import io
import os
import struct
import sys
import tarfile
import types
import zipfile

import numpy as np
import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import checksums
from tensorflow_datasets.image_classification import mnist as tfds_mnist

from tff_meta.data import images
from tff_meta.data import load_dataset
from tff_meta.data import tfds_images
from tff_meta.data.types import DataError
from tff_meta.fewround import tasks


def _idx(array: np.ndarray) -> bytes:
  return bytes([0, 0, 0x08, array.ndim]) + struct.pack(f'>{array.ndim}I', *array.shape) + \
      array.tobytes()


def _grey(n, seed, num_classes=10):
  """n distinct 28x28 images (pixel [0, 0] = running index) and their labels."""
  rng = np.random.default_rng(seed)
  x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
  x[:, 0, 0] = np.arange(n) + 100 * seed
  return x, rng.integers(0, num_classes, size=n).astype(np.uint8)


def _register_small_originals(mp, builder_cls, manual, size_only=False):
  """Records the small files in `manual` as the originals TFDS checks against."""
  infos = {}
  for url, info in builder_cls.url_infos.items():
    got = checksums.compute_url_info(manual / info.filename)
    infos[url] = checksums.UrlInfo(size=got.size, filename=info.filename,
                                   checksum=info.checksum if size_only else got.checksum)
  mp.setattr(builder_cls, 'url_infos', infos)


def _write_mnist_originals(manual, n_train=20, n_test=10):
  manual.mkdir(parents=True, exist_ok=True)
  arrays = {'train': _grey(n_train, 0), 't10k': _grey(n_test, 1)}
  for prefix, (x, y) in arrays.items():
    (manual / f'{prefix}-images-idx3-ubyte.gz').write_bytes(gzip.compress(_idx(x)))
    (manual / f'{prefix}-labels-idx1-ubyte.gz').write_bytes(gzip.compress(_idx(y)))
  return arrays


def _by_first_pixel(x, y):
  order = np.argsort(np.rint(x[:, 0, 0] * 255))
  return x[order], y[order]


@pytest.fixture(scope='module')
def mnist_dir(tmp_path_factory):
  """A TFDS data_dir with 20 + 10 MNIST images prepared offline from manual files."""
  root = tmp_path_factory.mktemp('tfds')
  manual = root / 'downloads' / 'manual'
  arrays = _write_mnist_originals(manual)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(tfds_mnist, '_TRAIN_EXAMPLES', 20)
    mp.setattr(tfds_mnist, '_TEST_EXAMPLES', 10)
    _register_small_originals(mp, tfds_mnist.MNIST, manual)
    first = images.load_centralized('mnist', tfds_data_dir=str(root), split='train')
  return root, arrays, first


def test_mnist_prepared_offline_from_manual_files_then_read(mnist_dir):
  root, arrays, train = mnist_dir
  assert (root / 'mnist' / '3.0.1' / 'dataset_info.json').is_file()
  assert train.x.shape == (20, 28, 28) and train.x.dtype == np.float32
  assert train.y.dtype == np.int32 and train.num_classes == 10
  assert train.origin == f'TFDS {root}/mnist/3.0.1'
  x, y = _by_first_pixel(train.x, train.y)
  np.testing.assert_allclose(x, arrays['train'][0] / 255.0)
  np.testing.assert_array_equal(y, arrays['train'][1])
  # The prepared copy is read without the originals, and again in the same order.
  moved = root / 'moved'
  os.rename(root / 'downloads', moved)
  try:
    again = images.load_centralized('mnist', tfds_data_dir=str(root), split='train')
    both = images.load_centralized('mnist', tfds_data_dir=str(root), split='all')
    test = images.load_centralized('mnist', tfds_data_dir=str(root), split='test')
    first7 = images.load_centralized('mnist', tfds_data_dir=str(root), max_examples=7)
  finally:
    os.rename(moved, root / 'downloads')
  np.testing.assert_array_equal(again.x, train.x)
  assert len(both.y) == 30 and len(test.y) == 10
  np.testing.assert_array_equal(both.x[:20], train.x)  # train, then test
  np.testing.assert_array_equal(both.x[20:], test.x)
  np.testing.assert_array_equal(_by_first_pixel(test.x, test.y)[1], arrays['t10k'][1])
  np.testing.assert_array_equal(first7.x, both.x[:7])


def test_registry_options_and_default_tfds_dir(mnist_dir, tmp_path, monkeypatch):
  root, _, _ = mnist_dir
  ds = load_dataset('mnist', tfds_data_dir=str(root), partition='iid', num_clients=3, seed=0)
  assert ds.num_examples == 30 and ds.element_shape == (28, 28)
  assert {len(c) for c in ds.clients.values()} == {10}
  assert f'from TFDS {root}/mnist/3.0.1' in ds.description
  files = load_dataset('mnist', tfds_data_dir=str(root), num_clients=5, labels_per_client=2,
                       split='train', partition='sort_and_shard', shards_per_client=2)
  assert files.num_examples == 20
  # With no folder given and no raw files in the default places, TFDS's
  # default data_dir ($TFDS_DATA_DIR) is read.
  monkeypatch.setattr(images, 'keras_cache_dirs', lambda: [str(tmp_path / 'keras')])
  monkeypatch.setenv('TFDS_DATA_DIR', str(root))
  data = images.load_centralized('mnist', split='test')
  assert len(data.y) == 10 and data.files == [f'{root}/mnist/3.0.1']
  monkeypatch.setenv('TFDS_DATA_DIR', str(tmp_path / 'empty'))
  with pytest.raises(DataError, match='tfds_data_dir'):
    images.load_centralized('mnist', split='test')


def test_unprepared_data_dir_gives_one_line_naming_folder_and_command(tmp_path):
  with pytest.raises(DataError) as e:
    images.load_centralized('fashion_mnist', tfds_data_dir=str(tmp_path))
  msg = str(e.value)
  assert '\n' not in msg
  assert f'no {tmp_path}/fashion_mnist/3.0.1/dataset_info.json' in msg
  assert f"tfds.builder('fashion_mnist', data_dir='{tmp_path}').download_and_prepare()" in msg
  assert f'{tmp_path}/downloads/manual' in msg and 't10k-labels-idx1-ubyte.gz' in msg
  assert not (tmp_path / 'fashion_mnist' / '3.0.1').exists()  # nothing fetched or written
  (tmp_path / 'cifar10' / '1.0.0').mkdir(parents=True)
  (tmp_path / 'cifar10' / '1.0.0' / 'dataset_info.json').write_text('{}')
  with pytest.raises(DataError, match=r"version\(s\) \['1.0.0'\]; this TFDS reads 3.0.2.*"
                     'cifar-10-binary.tar.gz'):
    load_dataset('cifar10', tfds_data_dir=str(tmp_path))
  with pytest.raises(DataError, match='not a folder'):
    images.load_centralized('mnist', tfds_data_dir=str(tmp_path / 'nowhere'))
  with pytest.raises(DataError, match='not both'):
    images.load_centralized('mnist', data_dir=str(tmp_path), tfds_data_dir=str(tmp_path))
  with pytest.raises(DataError, match='through TFDS only'):
    load_dataset('emnist_digits', data_dir=str(tmp_path))


def test_originals_that_differ_from_the_registered_ones_are_refused(tmp_path, monkeypatch):
  manual = tmp_path / 'downloads' / 'manual'
  _write_mnist_originals(manual)
  with pytest.raises(DataError, match=r't10k-images-idx3-ubyte.gz: \d+ bytes, but the original'):
    images.load_centralized('mnist', tfds_data_dir=str(tmp_path))  # TFDS's real checksums
  _register_small_originals(monkeypatch, tfds_mnist.MNIST, manual, size_only=True)
  with pytest.raises(DataError, match='ubyte.gz: SHA-256 differs from the original'):
    images.load_centralized('mnist', tfds_data_dir=str(tmp_path))
  assert not (tmp_path / 'mnist' / '3.0.1').exists()


def test_corrupt_prepared_shard_names_the_folder(mnist_dir, tmp_path):
  root, _, _ = mnist_dir
  copy = tmp_path / 'copy'
  os.makedirs(copy / 'mnist')
  src = root / 'mnist' / '3.0.1'
  os.makedirs(copy / 'mnist' / '3.0.1')
  for f in os.listdir(src):
    data = (src / f).read_bytes()
    (copy / 'mnist' / '3.0.1' / f).write_bytes(data[:len(data) // 2] if 'train' in f else data)
  with pytest.raises(DataError, match=f'{copy}/mnist/3.0.1: cannot read the prepared TFDS'):
    images.load_centralized('mnist', tfds_data_dir=str(copy), split='train')
  (copy / 'mnist' / '3.0.1' / 'dataset_info.json').write_text('{"name": ')
  with pytest.raises(DataError, match=f'{copy}/mnist: cannot open the prepared TFDS MNIST'):
    images.load_centralized('mnist', tfds_data_dir=str(copy), split='test')


def _tar_gz(path, files):
  with tarfile.open(path, 'w:gz') as tar:
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))


def _cifar_records(n, seed, label_columns):
  rng = np.random.default_rng(seed)
  labels = np.stack([rng.integers(0, k, size=n) for k in label_columns], 1).astype(np.uint8)
  pixels = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
  pixels[:, 0] = np.arange(n) + 10 * seed  # red [0, 0]: a running index
  return labels, pixels, np.concatenate([labels, pixels], 1).tobytes()


def test_cifar10_and_cifar100_binary_archives(tmp_path, monkeypatch):
  manual = tmp_path / 'downloads' / 'manual'
  manual.mkdir(parents=True)
  parts = [_cifar_records(2, s, [10]) for s in range(6)]
  names = [f'data_batch_{i}.bin' for i in range(1, 6)] + ['test_batch.bin']
  files = {f'cifar-10-batches-bin/{n}': p[2] for n, p in zip(names, parts)}
  files['cifar-10-batches-bin/batches.meta.txt'] = '\n'.join(f'c{i}' for i in range(10)).encode()
  _tar_gz(manual / 'cifar-10-binary.tar.gz', files)
  train100 = _cifar_records(6, 7, [20, 100])
  test100 = _cifar_records(3, 8, [20, 100])
  _tar_gz(manual / 'cifar-100-binary.tar.gz', {
      'cifar-100-binary/train.bin': train100[2], 'cifar-100-binary/test.bin': test100[2],
      'cifar-100-binary/coarse_label_names.txt': '\n'.join(map(str, range(20))).encode(),
      'cifar-100-binary/fine_label_names.txt': '\n'.join(map(str, range(100))).encode()})
  cifar10_cls, cifar100_cls = tfds.builder_cls('cifar10'), tfds.builder_cls('cifar100')
  # CIFAR-100's builder subclasses CIFAR-10's: register its files first.
  _register_small_originals(monkeypatch, cifar100_cls, manual)
  _register_small_originals(monkeypatch, cifar10_cls, manual)

  data = images.load_centralized('cifar10', tfds_data_dir=str(tmp_path))
  assert data.x.shape == (12, 32, 32, 3) and data.num_classes == 10
  test = images.load_centralized('cifar10', tfds_data_dir=str(tmp_path), split='test')
  assert len(test.y) == 2
  order = np.argsort(np.rint(data.x[:, 0, 0, 0] * 255))
  pixels = np.concatenate([p[1] for p in parts])
  labels = np.concatenate([p[0][:, 0] for p in parts])
  np.testing.assert_array_equal(data.y[order], labels)
  rows = pixels[3]
  got = data.x[order][3]
  # Records are the red, then green, then blue 32x32 planes.
  assert got[0, 0, 0] == pytest.approx(rows[0] / 255)
  assert got[0, 1, 1] == pytest.approx(rows[1024 + 1] / 255)
  assert got[1, 0, 2] == pytest.approx(rows[2048 + 32] / 255)
  np.testing.assert_allclose(got, rows.reshape(3, 32, 32).transpose(1, 2, 0) / 255.0)

  ds = load_dataset('cifar100', tfds_data_dir=str(tmp_path), partition='iid', num_clients=3)
  assert ds.num_classes == 100 and ds.num_examples == 9 and ds.element_shape == (32, 32, 3)
  c100 = images.load_centralized('cifar100', tfds_data_dir=str(tmp_path), split='train')
  order = np.argsort(np.rint(c100.x[:, 0, 0, 0] * 255))
  np.testing.assert_array_equal(c100.y[order], train100[0][:, 1])  # the fine labels
  # FRL's class-split CIFAR-100 (fewround) takes the same option.
  split = tasks.load_class_split('cifar100', tfds_data_dir=str(tmp_path))
  assert len(split.y) == 9 and split.element_shape == (32, 32, 3)
  assert f'TFDS {tmp_path}/cifar100/3.0.2' in split.description


def test_emnist_digits_from_nist_zip_is_upright(tmp_path, monkeypatch):
  manual = tmp_path / 'downloads' / 'manual'
  manual.mkdir(parents=True)
  arrays = {'train': _grey(12, 0), 'test': _grey(4, 1)}
  with zipfile.ZipFile(manual / 'gzip.zip', 'w') as z:
    for split, (x, y) in arrays.items():
      # NIST stores every character transposed.
      z.writestr(f'gzip/emnist-digits-{split}-images-idx3-ubyte.gz',
                 gzip.compress(_idx(np.ascontiguousarray(x.transpose(0, 2, 1)))))
      z.writestr(f'gzip/emnist-digits-{split}-labels-idx1-ubyte.gz', gzip.compress(_idx(y)))
  emnist_cls = tfds.builder_cls('emnist')
  config = emnist_cls.builder_configs['digits']
  monkeypatch.setattr(config, 'train_examples', 12)
  monkeypatch.setattr(config, 'test_examples', 4)
  _register_small_originals(monkeypatch, emnist_cls, manual)
  data = images.load_centralized('emnist_digits', tfds_data_dir=str(tmp_path), split='all')
  assert (tmp_path / 'emnist' / 'digits' / '3.1.0' / 'dataset_info.json').is_file()
  assert data.x.shape == (16, 28, 28) and data.num_classes == 10
  x, y = _by_first_pixel(data.x[:12], data.y[:12])
  np.testing.assert_allclose(x, arrays['train'][0] / 255.0)
  np.testing.assert_array_equal(y, arrays['train'][1])
  ds = load_dataset('emnist_digits', tfds_data_dir=str(tmp_path), split='test',
                    partition='iid', num_clients=2)
  assert ds.num_examples == 4 and ds.name == 'emnist_digits'
  assert images.SOURCES['emnist_byclass'].num_classes == 62


def test_default_data_dir_follows_tfds(monkeypatch, tmp_path):
  monkeypatch.delenv('TFDS_DATA_DIR', raising=False)
  monkeypatch.setenv('HOME', str(tmp_path))
  assert tfds_images.default_data_dir() == str(tmp_path / 'tensorflow_datasets')
  monkeypatch.setenv('TFDS_DATA_DIR', '/x/y')
  assert tfds_images.default_data_dir() == '/x/y'


def test_broken_tfds_install_is_one_error_line(monkeypatch, tmp_path):
  # tensorflow-metadata built for a newer protobuf: TFDS logs the ImportError
  # and leaves a module without `builder`, so both cases are checked.
  protos = sys.modules['tensorflow_metadata.proto.v0']
  monkeypatch.setitem(sys.modules, 'tensorflow_metadata.proto.v0', None)
  with pytest.raises(DataError, match='tensorflow-datasets cannot be imported .*requirements.txt'):
    images.load_centralized('mnist', tfds_data_dir=str(tmp_path))
  monkeypatch.setitem(sys.modules, 'tensorflow_metadata.proto.v0', protos)
  monkeypatch.setitem(sys.modules, 'tensorflow_datasets', types.ModuleType('tensorflow_datasets'))
  with pytest.raises(DataError, match='did not load completely'):
    images.load_centralized('mnist', tfds_data_dir=str(tmp_path))
