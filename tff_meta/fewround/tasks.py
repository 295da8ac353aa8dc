"""Class-split data and FRL episodes as TFF client values.

FRL (Park et al., "Few-Round Learning for Federated Learning", Sec. 4 and Appendix E): the
classes of a dataset are split into meta-train / validation / test classes
(64 / 16 / 20 for miniImageNet and CIFAR-100); an episode draws N classes of
one part, 120 images each, and deals them to K clients (IID or FedAvg's
2-shards-per-client non-IID split), each halving every class into support and
query (`tff_meta.data.episodes.sample_task`).

Sources (`CLASS_SPLIT_SOURCES`):
- 'emnist': TFF's federated EMNIST-62 (FEMNIST) file, all writers pooled;
  its 62 classes are split by `class_split` (default proportions 64/16/20:
  40 / 10 / 12 classes).
- 'leaf_femnist': FEMNIST in LEAF's JSON (`path`: LEAF's data folder, its
  train/ and test/ shards pooled), split in the same way: other writers
  than TFF's file, for checking a config on images it was not chosen on.
- 'cifar100': CIFAR-100 (train + test pooled; python pickles in `data_dir`,
  or a TFDS data_dir in `tfds_data_dir`), split 64/16/20.
- 'mini_imagenet', 'tiered_imagenet': a user-given folder in one of the
  common split formats (see `imagenet.py`); the split is the files' own.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
from typing import List, Sequence, Tuple, Union

import numpy as np

from tff_meta.data import episodes, load_dataset
from tff_meta.data.types import DataError
from tff_meta.core.registry import Registry

CLASS_SPLIT_SOURCES: Registry = Registry('class-split dataset')
PARTS = ('train', 'validation', 'test')


@dataclasses.dataclass
class ClassSplitData:
  """Labelled images and disjoint class lists per part."""
  name: str
  x: np.ndarray
  y: np.ndarray
  classes: 'collections.OrderedDict[str, np.ndarray]'   # part -> class ids
  description: str = ''

  @property
  def element_shape(self) -> Tuple[int, ...]:
    return tuple(self.x.shape[1:])

  def part(self, name: str) -> np.ndarray:
    if name not in self.classes:
      raise DataError(f'Unknown class part {name!r}; use one of {list(self.classes)}.')
    return self.classes[name]


def _split(name, x, y, fractions, seed, description, num_classes=None) -> ClassSplitData:
  parts = episodes.class_split(num_classes or int(y.max()) + 1, fractions, seed)
  return ClassSplitData(name, x, y.astype(np.int32),
                        collections.OrderedDict(zip(PARTS, parts)), description)


def _pooled_femnist(name, ds, fractions, split_seed) -> ClassSplitData:
  """A federated FEMNIST's writers pooled; its 62 classes split by `fractions`."""
  x = np.concatenate([c.x for c in ds.clients.values()])
  y = np.concatenate([c.y for c in ds.clients.values()])
  return _split(name, x, y, fractions, split_seed,
                f'FEMNIST-62, {len(ds.clients)} writers pooled ({len(y)} images); '
                f'{ds.description}', num_classes=ds.num_classes)


@CLASS_SPLIT_SOURCES.register('emnist')
def load_femnist(fractions=(64, 16, 20), split_seed=0, cache_dir=None,
                 download=True) -> ClassSplitData:
  return _pooled_femnist('emnist', load_dataset('emnist', cache_dir=cache_dir, download=download),
                         fractions, split_seed)


@CLASS_SPLIT_SOURCES.register('leaf_femnist')
def load_leaf_femnist(fractions=(64, 16, 20), split_seed=0, path=None) -> ClassSplitData:
  if not path:
    raise DataError('dataset leaf_femnist needs the LEAF FEMNIST data folder (with train/ and '
                    'test/ of *.json shards): pass --data_path=DIR.')
  return _pooled_femnist('leaf_femnist', load_dataset('leaf_femnist', path=path), fractions,
                         split_seed)


@CLASS_SPLIT_SOURCES.register('cifar100')
def load_cifar100(fractions=(64, 16, 20), split_seed=0, data_dir=None,
                  tfds_data_dir=None) -> ClassSplitData:
  from tff_meta.data import images  # pylint: disable=g-import-not-at-top
  data = images.load_centralized('cifar100', data_dir, 'all', tfds_data_dir=tfds_data_dir)
  return _split('cifar100', data.x, data.y, fractions, split_seed,
                f'CIFAR-100 from {data.origin} ({len(data.y)} images)')


def _imagenet(name):
  def load(path=None) -> ClassSplitData:
    from tff_meta.fewround import imagenet  # pylint: disable=g-import-not-at-top
    return ClassSplitData(name, *imagenet.load_split_folder(name, path))
  return load


CLASS_SPLIT_SOURCES.add('mini_imagenet', _imagenet('mini_imagenet'))
CLASS_SPLIT_SOURCES.add('tiered_imagenet', _imagenet('tiered_imagenet'))


def load_class_split(dataset: str, fractions=(64, 16, 20), split_seed: int = 0,
                     **options) -> ClassSplitData:
  """Loads `dataset`; sources with their own class split ignore fractions and seed."""
  loader = CLASS_SPLIT_SOURCES.get(dataset)
  params = inspect.signature(loader).parameters
  unknown = sorted(set(options) - set(params))
  if unknown:
    raise DataError(f'Unknown [data] option(s) {unknown} for {dataset!r}; valid: '
                    f'{sorted(set(params) - {"fractions", "split_seed"})}.')
  if 'fractions' in params:
    options.update(fractions=fractions, split_seed=split_seed)
  return loader(**options)


def path_option(dataset: str) -> str:
  """The loader option that names `dataset`'s folder (path, data_dir or cache_dir)."""
  params = inspect.signature(CLASS_SPLIT_SOURCES.get(dataset)).parameters
  return next(k for k in ('path', 'data_dir', 'cache_dir') if k in params)


def takes_option(dataset: str, option: str) -> bool:
  """Whether source `dataset`'s loader has option `option` (e.g. 'download')."""
  return option in inspect.signature(CLASS_SPLIT_SOURCES.get(dataset)).parameters


def _client_value(support_x, support_y, query_x, query_y, num_ways):
  return collections.OrderedDict(
      support_x=np.asarray(support_x, np.float32), support_y=np.asarray(support_y, np.int32),
      query_x=np.asarray(query_x, np.float32), query_y=np.asarray(query_y, np.int32),
      num_ways=np.int32(num_ways))


def episode(data: ClassSplitData, part: str, n_way: Union[int, Sequence[int]],
            examples_per_class: int, num_clients: int, iid: bool, seed) -> List:
  """One N-way episode of `part`'s classes as K client values (labels 0..N-1)."""
  n_way = tuple(n_way) if isinstance(n_way, (list, tuple)) else int(n_way)
  clients = episodes.sample_task(data.x, data.y, data.part(part), n_way, examples_per_class,
                                 num_clients, iid, seed)
  num_ways = 1 + max(int(c.support.y.max()) for c in clients)
  return [_client_value(c.support.x, c.support.y, c.query.x, c.query.y, num_ways)
          for c in clients]


def pretrain_clients(data: ClassSplitData, n_way, examples_per_class: int, num_clients: int,
                     iid: bool, seed) -> List:
  """K clients of the meta-train classes with *global* labels 0..M-1 (M = all
  meta-train classes), all data as training data: one round of pre-training
  for the fine-tuning baselines (Sec. 4). Episodes are sampled as in
  `episode` (on dataset indices, so the original labels can be recovered)."""
  train = data.part('train')
  n_way = tuple(n_way) if isinstance(n_way, (list, tuple)) else int(n_way)
  index = np.arange(len(data.y))
  clients = episodes.sample_task(index, data.y, train, n_way, examples_per_class,
                                 num_clients, iid, seed)
  out = []
  for c in clients:
    rows = np.concatenate([c.support.x, c.query.x])
    labels = np.searchsorted(train, data.y[rows])
    out.append(_client_value(data.x[rows], labels, data.x[rows[:0]], labels[:0], len(train)))
  return out
