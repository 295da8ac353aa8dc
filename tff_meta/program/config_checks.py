"""Checks of an experiment config beyond single values' types (called by `config.py`).

Each check raises `ConfigError` naming the key, what it got and what it
takes, so a bad value stops a program before it reads data or writes a file.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict

TABLES = ('data', 'model_options', 'hparams', 'method_hparams')


def check_tables(raw: Dict[str, Any], source: str, error: type) -> None:
  """[data], [model_options], [hparams] and [method_hparams.<name>] must be TOML tables."""
  for key in TABLES:
    if key in raw and not isinstance(raw[key], dict):
      raise error(f'{source}: {key} must be a table ([{key}] with key = value lines), '
                  f'got {raw[key]!r}.')
  for method, values in raw.get('method_hparams', {}).items():
    if not isinstance(values, dict):
      raise error(f'{source}: method_hparams.{method} must be a table '
                  f'([method_hparams.{method}] with hparams key = value lines), got {values!r}.')


def check_values(cfg, error: type) -> None:
  """Ranges of the top-level keys the per-key checks of `ExperimentConfig.validate` leave
  open (each hparam's range is declared with its field: `algorithms.hparams`)."""
  for field in dataclasses.fields(cfg):
    value = getattr(cfg, field.name)
    if isinstance(value, float) and not math.isfinite(value):
      raise error(f'{field.name} must be a finite number, got {value}.')
  for key in ('seed', 'min_samples'):
    if getattr(cfg, key) < 0:
      raise error(f'{key} must be >= 0, got {getattr(cfg, key)}.')
  split = cfg.client_split
  if (len(split) != 3 or not all(math.isfinite(v) and v >= 0 for v in split)
      or abs(sum(split) - 1.0) > 1e-6 or split[0] <= 0):
    raise error(f'client_split must be 3 fractions (train, validation, test) >= 0 summing to 1 '
                f'with train > 0, e.g. 0.8,0.1,0.1; got {",".join(map(str, split))}.')
  calls = cfg.max_concurrent_calls
  if calls < 1 and calls != -1:
    raise error(f'max_concurrent_calls must be -1 (no bound) or >= 1, got {calls}.')
