"""Checks of an experiment config's tables and of client_split (used by `config.py`).

Each check raises `ConfigError` naming the key, what it got and what it
takes, so a bad value stops a program before it reads data or writes a file.
"""

from __future__ import annotations

import math
from typing import Any, Dict

from tff_meta.core.fields import Check

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


def _is_client_split(split) -> bool:
  return (len(split) == 3 and all(math.isfinite(v) and v >= 0 for v in split)
          and abs(sum(split) - 1.0) <= 1e-6 and split[0] > 0)


# client_split's range (`ExperimentConfig.client_split`'s check).
CLIENT_SPLIT = Check('3 fractions (train, validation, test) >= 0 summing to 1 with train > 0, '
                     'e.g. 0.8,0.1,0.1', _is_client_split)
