"""Centralized image datasets (MNIST, Fashion-MNIST, CIFAR-10/100, EMNIST), split into clients.

The image benchmarks of FedEC (Lan et al., CIFAR-10/100 in Table 2) and of
the MNIST / CIFAR-10 report (003) are centralized datasets that are split
into non-IID clients with a seeded partitioner (`partition.PARTITIONERS`:
label_shards, sort_and_shard, dirichlet, iid). Nothing is ever downloaded.
There are two sources:

  TFDS (`tfds_data_dir`, see `tfds_images.py`): a TensorFlow Datasets
      data_dir holding the prepared dataset, or the original archives in its
      downloads/manual/ folder, from which TFDS prepares it offline. The
      EMNIST configurations (emnist_byclass, ...) are read only this way.
  Raw files, which TFDS cannot take (its builders accept only the exact
      original archives, checked by SHA-256, and need a writable data_dir), read
      by the parsers below from

  (a) a folder the user gives (`data_dir`), holding
        mnist, fashion_mnist: the IDX files train-images-idx3-ubyte,
          train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
          t10k-labels-idx1-ubyte (each optionally .gz), or Keras' mnist.npz;
        cifar10: the python pickle batches data_batch_1..5 and test_batch
          (cifar-10-batches-py from cifar-10-python.tar.gz);
        cifar100: the pickles train and test (cifar-100-python), fine labels;
      `data_dir` may also be the parent of Keras' subfolder (e.g.
      ~/.keras/datasets), or
  (b) when neither folder is given, the default places: Debian's
      `dataset-fashion-mnist` package folder /usr/share/datasets/fashion-mnist
      (Fashion-MNIST only), then the `tf.keras.datasets` caches
      ~/.keras/datasets/<subfolder> and /tmp/.keras/datasets/<subfolder>,
      then TFDS's default data_dir ($TFDS_DATA_DIR or ~/tensorflow_datasets)
      if it has a folder for the dataset.

If no place has the files, `DataError` names the files and the folders
searched. Images become float32 in [0, 1] (pixel / 255), kept as in the
source: MNIST is white digits on 0 = black background, CIFAR is [32, 32, 3]
RGB; both sources give the same shapes ([28, 28] for the grey datasets).
CIFAR pickles are read with an unpickler that only accepts the numpy array
types such files contain.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.data import image_files
from tff_meta.data import partition as partition_lib
from tff_meta.data import tfds_images
from tff_meta.data.types import DataError, FederatedDataset

_SPLITS = ('train', 'test', 'all')
IDX_FILES = {
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}
# IDX type byte -> numpy dtype (big-endian for multi-byte types).


@dataclasses.dataclass(frozen=True)
class _Source:
  kind: str                 # 'idx', 'cifar' (raw files or TFDS) or 'tfds' (TFDS only)
  num_classes: int
  keras_subdir: str         # under <keras cache>/datasets
  default_dirs: Tuple[str, ...] = ()
  title: str = ''
  tfds_name: str = ''       # TFDS name[/config]
  transpose: bool = False   # TFDS stores EMNIST transposed


SOURCES: Dict[str, _Source] = {
    'mnist': _Source('idx', 10, '', title='MNIST', tfds_name='mnist'),
    'fashion_mnist': _Source('idx', 10, 'fashion-mnist', ('/usr/share/datasets/fashion-mnist',),
                             'Fashion-MNIST', 'fashion_mnist'),
    'cifar10': _Source('cifar', 10, 'cifar-10-batches-py', title='CIFAR-10', tfds_name='cifar10'),
    'cifar100': _Source('cifar', 100, 'cifar-100-python', title='CIFAR-100',
                        tfds_name='cifar100'),
}
# Centralized EMNIST (NIST's split, no writers: unlike the federated 'emnist'),
# through TFDS only; TFDS's 'letters' labels are 1..26 of 37 declared classes.
for _config, _classes in (('byclass', 62), ('balanced', 47), ('letters', 37), ('digits', 10)):
  SOURCES[f'emnist_{_config}'] = _Source('tfds', _classes, '', title=f'EMNIST {_config}',
                                         tfds_name=f'emnist/{_config}', transpose=True)
del _config, _classes


@dataclasses.dataclass
class CentralizedData:
  """One centralized labelled dataset: x float32 [n, ...] in [0, 1], y int32 [n]."""
  name: str
  x: np.ndarray
  y: np.ndarray
  num_classes: int
  files: List[str]
  origin: str = ''          # the folder read, for descriptions


# ---------------------------------------------------------------------------
# File formats.

def keras_cache_dirs() -> List[str]:
  """The `datasets` folders `tf.keras.datasets` downloads into (~/.keras, /tmp/.keras)."""
  bases = [os.environ.get('KERAS_HOME'), os.path.join(os.path.expanduser('~'), '.keras'),
           os.path.join('/tmp', '.keras')]
  return [os.path.join(b, 'datasets') for b in bases if b]


def _find_file(folder: str, name: str) -> Optional[str]:
  for candidate in (name, name + '.gz', name.replace('-idx', '.idx')):
    path = os.path.join(folder, candidate)
    if os.path.isfile(path):
      return path
  return None


def _cifar_batches(folder: str, name: str, split: str) -> Optional[List[str]]:
  if name == 'cifar10':
    def number(p):
      m = re.search(r'(\d+)$', p)
      return int(m.group(1)) if m else 0
    train = sorted(glob.glob(os.path.join(folder, 'data_batch_*')), key=number)
    test = [p for p in [os.path.join(folder, 'test_batch')] if os.path.isfile(p)]
  else:
    train = [p for p in [os.path.join(folder, 'train')] if os.path.isfile(p)]
    test = [p for p in [os.path.join(folder, 'test')] if os.path.isfile(p)]
  parts = {'train': [train], 'test': [test], 'all': [train, test]}[split]
  if all(parts):
    return [p for part in parts for p in part]
  return None


def _expected(name: str, split: str) -> str:
  src = SOURCES[name]
  splits = ('train', 'test') if split == 'all' else (split,)
  if src.kind == 'idx':
    files = [f for s in splits for f in IDX_FILES[s]]
    text = ', '.join(f'{f}[.gz]' for f in files)
    return text + (' (or mnist.npz)' if name == 'mnist' else '')
  if name == 'cifar10':
    return ', '.join({'train': ['data_batch_1 .. data_batch_5'], 'test': ['test_batch']}[s][0]
                     for s in splits)
  return ', '.join(splits)


def _search_dirs(name: str, data_dir: Optional[str]) -> List[str]:
  """Folders to try, in order: data_dir (and its Keras subfolder) or the defaults."""
  src = SOURCES[name]
  bases = [os.path.expanduser(data_dir)] if data_dir is not None else keras_cache_dirs()
  out = [] if data_dir is not None else list(src.default_dirs)
  for base in bases:
    if data_dir is not None or not src.keras_subdir:
      out.append(base)
    if src.keras_subdir:
      out.append(os.path.join(base, src.keras_subdir))
  return out


def _load_from(folder: str, name: str, split: str) -> Optional[Tuple[np.ndarray, np.ndarray, List[str]]]:
  """Reads `name` from `folder`, or returns None when the folder lacks its files."""
  src = SOURCES[name]
  splits = ('train', 'test') if split == 'all' else (split,)
  if src.kind == 'idx':
    paths = [(_find_file(folder, IDX_FILES[s][0]), _find_file(folder, IDX_FILES[s][1]))
             for s in splits]
    if all(p and q for p, q in paths):
      xs, ys = [], []
      for image_path, label_path in paths:
        x, y = image_files.read_idx(image_path), image_files.read_idx(label_path)
        if x.ndim != 3:
          raise DataError(f'{image_path}: IDX images must have 3 dimensions [n, rows, cols], '
                          f'found shape {x.shape}.')
        if y.ndim != 1:
          raise DataError(f'{label_path}: IDX labels must have 1 dimension, found {y.shape}.')
        if len(x) != len(y):
          raise DataError(f'{image_path} has {len(x)} images but {label_path} has {len(y)} '
                          'labels; the files come from different downloads.')
        image_files.check_labels(label_path, y, src.num_classes)
        xs.append(x)
        ys.append(y)
      return np.concatenate(xs), np.concatenate(ys).astype(np.int32), [
          p for pair in paths for p in pair]
    npz = os.path.join(folder, 'mnist.npz')
    if name == 'mnist' and os.path.isfile(npz):
      try:
        with np.load(npz, allow_pickle=False) as f:
          arrays = {s: (f[f'x_{s}'], f[f'y_{s}']) for s in splits}
      except (OSError, KeyError, ValueError) as e:
        raise DataError(f'{npz}: not a Keras mnist.npz with x_train, y_train, x_test, y_test '
                        f'({e}).') from e
      for _, y in arrays.values():
        image_files.check_labels(npz, np.asarray(y), 10)
      return (np.concatenate([a[0] for a in arrays.values()]),
              np.concatenate([a[1] for a in arrays.values()]).astype(np.int32), [npz])
    return None
  batches = _cifar_batches(folder, name, split)
  if batches is None:
    return None
  label_key = 'labels' if name == 'cifar10' else 'fine_labels'
  parts = [image_files.read_cifar_batch(p, label_key, src.num_classes) for p in batches]
  return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), batches)


def _finish(name: str, x: np.ndarray, y: np.ndarray, files: List[str], origin: str,
            max_examples: int) -> CentralizedData:
  if max_examples > 0:
    x, y = x[:max_examples], y[:max_examples]
  x = x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)
  return CentralizedData(name, x, y, SOURCES[name].num_classes, files, origin)


def _from_tfds(name: str, tfds_data_dir: str, split: str, max_examples: int) -> CentralizedData:
  src = SOURCES[name]
  x, y, folder = tfds_images.load(src.tfds_name, tfds_data_dir, split, src.title, src.transpose)
  return _finish(name, x, y, [folder], f'TFDS {folder}', max_examples)


def load_centralized(name: str, data_dir: Optional[str] = None, split: str = 'all',
                     max_examples: int = 0, tfds_data_dir: Optional[str] = None) -> CentralizedData:
  """Reads image dataset `name` from TFDS, `data_dir` or the default places (see module doc).

  Args:
    name: one of `names()` ('mnist', 'fashion_mnist', 'cifar10', 'cifar100',
      'emnist_byclass', ...).
    data_dir: a folder with the raw files; None searches the default places.
    split: 'train', 'test', or 'all' (train then test).
    max_examples: > 0 keeps the first N examples (after concatenating, in the
      source's order: the files' order, or TFDS's fixed prepared order).
    tfds_data_dir: a TFDS data_dir to read instead (not with data_dir); the
      EMNIST names use TFDS's default data_dir when it is None.

  Returns:
    `CentralizedData` with x float32 in [0, 1] and y int32.
  """
  if name not in SOURCES:
    raise DataError(f'Unknown image dataset {name!r}; expected one of {sorted(SOURCES)}.')
  if split not in _SPLITS:
    raise DataError(f'split must be one of {_SPLITS}, got {split!r}.')
  src = SOURCES[name]
  if data_dir is not None and tfds_data_dir is not None:
    raise DataError(f'Give {src.title} either data_dir (raw files) or tfds_data_dir (a TFDS '
                    'data_dir), not both.')
  if src.kind == 'tfds' and data_dir is not None:
    raise DataError(f'{src.title} is read through TFDS only: pass tfds_data_dir (a TFDS '
                    f'data_dir holding {src.tfds_name}/) instead of data_dir.')
  if tfds_data_dir is not None or src.kind == 'tfds':
    return _from_tfds(name, tfds_data_dir or tfds_images.default_data_dir(), split, max_examples)
  if data_dir is not None and not os.path.isdir(os.path.expanduser(data_dir)):
    raise DataError(f'{src.title} data_dir {data_dir!r} is not a folder; it must '
                    f'hold {_expected(name, split)}.')
  searched = _search_dirs(name, data_dir)
  for folder in searched:
    found = _load_from(folder, name, split) if os.path.isdir(folder) else None
    if found is not None:
      x, y, files = found
      return _finish(name, x, y, files, os.path.dirname(files[0]), max_examples)
  tfds_default = tfds_images.default_data_dir()
  if data_dir is None and tfds_images.has_dataset_folder(src.tfds_name, tfds_default):
    return _from_tfds(name, tfds_default, split, max_examples)
  hint = ('install Debian\'s dataset-fashion-mnist package, or ' if name == 'fashion_mnist'
          else '')
  raise DataError(
      f'{src.title} files not found: expected {_expected(name, split)} in one of '
      f'{searched}. Nothing is downloaded: {hint}copy the files into a folder and pass it as '
      f'data_dir, or run tf.keras.datasets.{name}.load_data() once on a machine with internet '
      'and copy ~/.keras/datasets here, or pass tfds_data_dir = a TFDS data_dir with '
      f'{src.tfds_name} prepared (docs/DATA.md).')


def load_image_dataset(name: str, data_dir: Optional[str] = None, partition: str = 'label_shards',
                       num_clients: int = 100, labels_per_client: int = 2,
                       shards_per_client: int = 2, alpha: float = 0.5, min_size: int = 10,
                       seed: int = 0, split: str = 'all', max_examples: int = 0,
                       tfds_data_dir: Optional[str] = None) -> FederatedDataset:
  """An image dataset split into `num_clients` clients by a seeded partitioner.

  Args:
    name: one of `names()`.
    data_dir: folder with the raw files (see module doc); None = default places.
    partition: 'label_shards' (k = labels_per_client distinct classes per
      client, FedEC / report 003), 'sort_and_shard' (FedAvg, shards_per_client
      shards), 'dirichlet' (alpha, min_size) or 'iid'.
    num_clients: number of clients.
    labels_per_client, shards_per_client, alpha, min_size: the scheme's option
      (the others are ignored).
    seed: partition seed; the same seed gives the same clients.
    split: 'train', 'test' or 'all' (the protocol re-splits every client).
    max_examples: > 0 keeps the first N examples before partitioning.
    tfds_data_dir: a TFDS data_dir to read instead of raw files
      (`tfds_images.py`; prepared there offline from the original archives in
      its downloads/manual/ folder if needed).
  """
  data = load_centralized(name, data_dir, split, max_examples, tfds_data_dir)
  options = {'label_shards': {'labels_per_client': labels_per_client},
             'sort_and_shard': {'shards_per_client': shards_per_client},
             'dirichlet': {'alpha': alpha, 'min_size': min_size}}.get(partition, {})
  clients = partition_lib.partition(data.x, data.y, partition, num_clients, seed,
                                    num_classes=data.num_classes, id_prefix=name, **options)
  detail = ', '.join(f'{k}={v}' for k, v in options.items())
  return FederatedDataset(
      name=name, clients=clients, num_classes=data.num_classes,
      element_shape=tuple(data.x.shape[1:]), source=data.origin, x_range=(0.0, 1.0),
      description=(f'{SOURCES[name].title} (split {split}, {len(data.y)} images) from '
                   f'{data.origin}, {num_clients} clients by {partition}'
                   + (f' ({detail})' if detail else '')),
      extras={'files': data.files, 'partition': partition})


def names() -> Sequence[str]:
  return sorted(SOURCES)
