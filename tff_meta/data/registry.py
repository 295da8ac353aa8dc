"""Name -> loader. Each loader takes keyword options and returns a dataset.

Every loader returns a `FederatedDataset` (client id -> (x, y) arrays), except
'movielens', whose targets are real-valued ratings: it returns a
`movielens.RatingsDataset` (client id -> `UserRatings`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import TYPE_CHECKING, Callable, Union

from tff_meta.data import checks
from tff_meta.data.embedded import load_digits
from tff_meta.data.types import DataError, FederatedDataset
from tff_meta.core.registry import Registry

if TYPE_CHECKING:
  from tff_meta.data.movielens import RatingsDataset

AnyDataset = Union[FederatedDataset, 'RatingsDataset']


class _Lazy:
  """A loader imported on first use (TFF/LEAF readers pull in heavier modules)."""

  def __init__(self, module: str, fn: str, **fixed):
    self._module, self._fn, self._fixed = module, fn, fixed

  def resolve(self) -> Callable[..., AnyDataset]:
    module = importlib.import_module(f'tff_meta.data.{self._module}')
    return functools.partial(getattr(module, self._fn), **self._fixed)

  def __call__(self, **options) -> AnyDataset:
    return self.resolve()(**options)


DATASETS: Registry = Registry('dataset')
DATASETS.add('digits', load_digits)
DATASETS.add('emnist', _Lazy('tff_native', 'load_emnist'))
DATASETS.add('shakespeare', _Lazy('tff_native', 'load_shakespeare'))
# TFF's federated CIFAR-100 (its own partition; 'cifar100' below is the
# centralized CIFAR-100 split into clients by a partitioner).
DATASETS.add('tff_cifar100', _Lazy('tff_native', 'load_tff_cifar100'))
DATASETS.add('stackoverflow', _Lazy('stackoverflow', 'load_stackoverflow'))
DATASETS.add('leaf_femnist', _Lazy('leaf', 'load_leaf', task='femnist'))
DATASETS.add('leaf_shakespeare', _Lazy('leaf', 'load_leaf', task='shakespeare'))
DATASETS.add('leaf_sent140', _Lazy('leaf', 'load_leaf', task='sent140'))
# Centralized image datasets split into clients (images.py; read offline from
# raw files or a TFDS data_dir; the emnist_* configurations through TFDS only).
for _name in ('mnist', 'fashion_mnist', 'cifar10', 'cifar100', 'emnist_byclass',
              'emnist_balanced', 'emnist_letters', 'emnist_digits'):
  DATASETS.add(_name, _Lazy('images', 'load_image_dataset', name=_name))
del _name
# A federated source pooled and re-split by label shards (FedEC's FEMNIST (150, 3)).
DATASETS.add('emnist_label_shards', _Lazy('repartition', 'load_repartitioned', source='emnist'))
# Real-valued ratings: returns a movielens.RatingsDataset, not a FederatedDataset.
DATASETS.add('movielens', _Lazy('movielens', 'load_movielens'))


def _loader(name: str) -> Callable[..., AnyDataset]:
  loader = DATASETS.get(name)
  return loader.resolve() if isinstance(loader, _Lazy) else loader


def takes_option(name: str, option: str) -> bool:
  """Whether dataset `name`'s loader has keyword option `option` (e.g. 'download')."""
  return option == checks.DROP_OPTION or option in inspect.signature(_loader(name)).parameters


def load_dataset(name: str, **options) -> AnyDataset:
  """Loads dataset `name`; an unknown option raises an error naming the valid ones.

  Every dataset is checked as it is built (`checks`): a client that fails the
  data check raises `DataError`, unless the option `drop_bad_clients=True`
  (every loader takes it; `[data] drop_bad_clients = true`) leaves such
  clients out, with a note saying how many.

  Returns what the loader returns: a `FederatedDataset` for every source but
  'movielens', which gives a `movielens.RatingsDataset`.
  """
  drop = options.pop(checks.DROP_OPTION, False)
  if not isinstance(drop, bool):
    raise DataError(f'[data] {checks.DROP_OPTION} must be true or false, got {drop!r}.')
  fn = _loader(name)
  params = inspect.signature(fn).parameters
  if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
    unknown = sorted(set(options) - set(params))
    if unknown:
      valid = sorted([k for k, p in params.items() if p.kind != p.VAR_POSITIONAL]
                     + [checks.DROP_OPTION])
      raise DataError(f'Unknown option(s) {unknown} for dataset {name!r}; valid: {valid}.')
  with checks.dropping_bad_clients(drop):
    return fn(**options)
