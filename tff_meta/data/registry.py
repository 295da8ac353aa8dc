"""Name -> loader. Each loader takes keyword options and returns a FederatedDataset."""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Callable

from tff_meta.data.embedded import load_digits
from tff_meta.data.types import DataError, FederatedDataset
from tff_meta.registry import Registry


class _Lazy:
  """A loader imported on first use (TFF/LEAF readers pull in heavier modules)."""

  def __init__(self, module: str, fn: str, **fixed):
    self._module, self._fn, self._fixed = module, fn, fixed

  def resolve(self) -> Callable[..., FederatedDataset]:
    module = importlib.import_module(f'tff_meta.data.{self._module}')
    return functools.partial(getattr(module, self._fn), **self._fixed)

  def __call__(self, **options) -> FederatedDataset:
    return self.resolve()(**options)


DATASETS: Registry = Registry('dataset')
DATASETS.add('digits', load_digits)
DATASETS.add('emnist', _Lazy('tff_native', 'load_emnist'))
DATASETS.add('shakespeare', _Lazy('tff_native', 'load_shakespeare'))
DATASETS.add('leaf_femnist', _Lazy('leaf', 'load_leaf', task='femnist'))
DATASETS.add('leaf_shakespeare', _Lazy('leaf', 'load_leaf', task='shakespeare'))
DATASETS.add('leaf_sent140', _Lazy('leaf', 'load_leaf', task='sent140'))
# Centralized image datasets split into clients (images.py; read offline).
for _name in ('mnist', 'fashion_mnist', 'cifar10', 'cifar100'):
  DATASETS.add(_name, _Lazy('images', 'load_image_dataset', name=_name))
del _name


def load_dataset(name: str, **options) -> FederatedDataset:
  """Loads dataset `name`; an unknown option raises an error naming the valid ones."""
  loader = DATASETS.get(name)
  fn = loader.resolve() if isinstance(loader, _Lazy) else loader
  params = inspect.signature(fn).parameters
  if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
    unknown = sorted(set(options) - set(params))
    if unknown:
      raise DataError(f'Unknown option(s) {unknown} for dataset {name!r}; valid: '
                       f'{sorted(k for k, p in params.items() if p.kind != p.VAR_POSITIONAL)}.')
  return fn(**options)
