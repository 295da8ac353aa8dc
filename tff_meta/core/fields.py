"""Declared fields: one `field` for every config key and every hyperparameter.

A config class (`classification/config.py`, `fewround/config.py`,
`recommendation/config.py`) and an algorithm's hparams dataclass
(`algorithms/hparams.py`) declare each value with `field(default, help,
check)`. From that one declaration come the flag and its help
(`config_file.define_flags`), the docs' description and the range error
(`check_fields`): "rounds must be >= 1, got 0." A check that relates several
fields stays in the class's `validate()`. A setting several classes share
(`inner_lr`, `server_lr`, `seed`, ...) is declared once and used elsewhere
through `declared(source, name, default)`, which may change its default only.

It imports neither TensorFlow nor the rest of the package.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Optional, Union


@dataclasses.dataclass(frozen=True)
class Check:
  """A range one value must be in: `ok(value)`; `says` (or a function giving it) completes
  'must be ...'."""
  says: Union[str, Callable[[], str]]
  ok: Callable[[Any], bool]

  def text(self) -> str:
    return self.says() if callable(self.says) else self.says


def above(low) -> Check:
  return Check(f'> {low}', lambda v: v > low)


def at_least(low) -> Check:
  return Check(f'>= {low}', lambda v: v >= low)


def between(low, high) -> Check:
  return Check(f'in [{low}, {high}]', lambda v: low <= v <= high)


def fraction(zero_ok: bool = False) -> Check:
  """A fraction in (0, 1), or with `zero_ok` in [0, 1) (0: none)."""
  if zero_ok:
    return Check('in [0, 1)', lambda v: 0.0 <= v < 1.0)
  return Check('in (0, 1)', lambda v: 0.0 < v < 1.0)


def _names(values) -> list:
  """The allowed names: a registry's (`names()`), a function's result, or the values."""
  if hasattr(values, 'names'):
    return list(values.names())
  return list(values() if callable(values) else values)


def one_of(values: Union[Iterable[str], Callable[[], Iterable[str]]]) -> Check:
  """One of `values`: a tuple, a dict's keys, a `Registry` or a function giving them; read when
  checked, so a registry filled after the declaration counts."""
  def says() -> str:
    return 'one of ' + ', '.join(str(v) if v != '' else "''" for v in _names(values))
  return Check(says, lambda v: v in _names(values))


def registered(registry: Callable[[], Any]) -> Check:
  """A name `registry()` (a function, so the registry may be imported late) holds; an unknown
  name is the registry's own error (it suggests the closest name)."""
  def ok(value) -> bool:
    registry().get(value)
    return True
  return Check(lambda: 'one of ' + ', '.join(registry().names()), ok)


def field(default, help: str, check: Optional[Check] = None, *,  # pylint: disable=redefined-builtin
          item: type = float, symbol: str = ''):
  """A config key or hparam: its default, its help (a str, or a function giving it at flag
  time), its range `check` and, for messages, the paper's `symbol`.

  A tuple field takes a TOML list, a comma-separated string or one value;
  `item` is the type of its elements.
  """
  return dataclasses.field(default=default, metadata={'help': help, 'check': check,
                                                      'item': item, 'symbol': symbol})


_UNSET = object()


def declared(source: type, name: str, default: Any = _UNSET):
  """Field `name` of dataclass `source`, used in another class: its help, check, item and
  symbol come from that one declaration, and only the default may change (a task's own)."""
  for f in dataclasses.fields(source):
    if f.name == name:
      metadata = {'declared_in': f'{source.__module__}.{source.__qualname__}', **f.metadata}
      return dataclasses.field(default=f.default if default is _UNSET else default,
                               metadata=metadata)
  raise TypeError(f'{source.__qualname__} declares no field {name!r}')


def help_of(field_: dataclasses.Field) -> str:
  text = field_.metadata.get('help', '')
  return text() if callable(text) else text


def check_of(field_: dataclasses.Field) -> Optional[Check]:
  return field_.metadata.get('check')


def range_help(field_: dataclasses.Field) -> str:
  """' Must be >= 1.' for a checked field, '' otherwise (the flag's and the docs' text)."""
  check = check_of(field_)
  return f' Must be {check.text()}.' if check is not None else ''


def check_fields(values, error: type, prefix: str = '') -> None:
  """Raises `error` for the first field of dataclass instance `values` out of its range.

  A float must be finite, then each field is in its declared `check`; tables
  (dicts, nested dataclasses) are not values and are skipped.
  """
  for f in dataclasses.fields(values):
    if f.metadata.get('table'):
      continue
    value = getattr(values, f.name)
    check = check_of(f)
    symbol = f.metadata.get('symbol')
    name = f'{prefix}{f.name}' + (f' ({symbol})' if symbol else '')
    if isinstance(value, float) and not math.isfinite(value):
      raise error(f'{name} must be a finite number, got {value}.')
    if check is not None and not check.ok(value):
      shown = (repr(value) if isinstance(value, str) else
               list(value) if isinstance(value, tuple) else value)
      raise error(f'{name} must be {check.text()}, got {shown}.')
