"""Resuming into a run folder: the settings that change what a run computes must match.

A run folder's `config.toml` holds the settings it was started with. Before a
run resumes into a folder, `claim_for_resume` compares every setting with it:
a key that differs, other than those the config module declares may differ
(how a run executes: workers, progress, output paths), stops the run with one
`RunFolderError` naming each key (old -> new), every file left as it was.
Keys nobody declared count as changing what is computed. Each config module
gives its rules (`resume_rules()`: `may_differ`, `may_grow`, `defaults`).
"""

from __future__ import annotations

import math
import os
import tomllib
from typing import Any, Dict, Iterable, List, Mapping, Optional

from tff_meta.core import files
from tff_meta.core.run_folder import CONFIG_FILE, RunFolderError, short_error

class _Absent:
  def __repr__(self) -> str:
    return '(absent)'


_ABSENT = _Absent()   # a key one of the two configs lacks (and no default names)
UNKNOWN = 'not a setting of this version'   # a saved top-level key today's schema lacks
# What a refusal suggests when a saved key is unknown: it may have been renamed.
RENAME_HINT = ('if a key was renamed, research/rename_config_keys.py (in a clone of the '
               'repository: `python -m research.rename_config_keys {folder}`) rewrites its name '
               'in the folder')


def flatten_settings(config: Mapping[str, Any], prefix: str = '') -> Dict[str, Any]:
  """A config as TOML reads it, with its tables' keys dotted: {'hparams': {'inner_lr': 0.1}}
  -> {'hparams.inner_lr': 0.1}."""
  flat = {}
  for key, value in config.items():
    if isinstance(value, Mapping):
      flat.update(flatten_settings(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def _covered(key: str, keys: Iterable[str]) -> bool:
  """Whether dotted `key` is one of `keys` or inside one of their tables."""
  return any(key == k or key.startswith(k + '.') for k in keys)


def _same(a: Any, b: Any) -> bool:
  if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
    return True
  return a == b


def settings_changes(saved: Mapping[str, Any], current: Mapping[str, Any], *,
                     may_differ: Iterable[str], may_grow: Iterable[str] = (),
                     defaults: Optional[Mapping[str, Any]] = None) -> List[str]:
  """'key: old -> new' for each setting in which `current` differs from `saved` (both as TOML
  reads them, tables nested), sorted by key.

  Keys in `may_differ` (or inside those tables) are not compared; a key in `may_grow` may take
  a larger number (more rounds extend a run), not a smaller one. A key `saved` lacks (a config
  written before the key existed) counts as its value in `defaults` (a config of defaults,
  nested the same way). A saved top-level key that `current` does not have (renamed or
  dropped from the schema; `current` holds every key of today's schema) is a change to
  '(not a setting of this version)': its value entered the saved run, and resuming without it
  could compute something else.
  """
  old = flatten_settings(saved)
  new = flatten_settings(current)
  default = flatten_settings(defaults or {})
  may_differ, may_grow = tuple(may_differ), frozenset(may_grow)
  changes = []
  for key in sorted(set(old) | set(new)):
    if _covered(key, may_differ):
      continue
    if key.split('.')[0] not in current:
      changes.append(f'{key}: {old[key]!r} -> ({UNKNOWN})')
      continue
    before = old.get(key, default.get(key, _ABSENT))
    after = new.get(key, default.get(key, _ABSENT))
    if _same(before, after):
      continue
    growing = key in may_grow
    if growing and all(isinstance(v, (int, float)) for v in (before, after)) and after > before:
      continue
    changes.append(f'{key}: {before!r} -> {after!r}' + (' (it may only grow)' if growing else ''))
  return changes


def check_resume(folder: str, current: Mapping[str, Any], **rules) -> None:
  """Refuses to resume into `folder` if its config.toml holds other settings than `current`.

  `current` is the run's config as TOML reads it back (what it saves as config.toml);
  `rules` are `settings_changes`' (may_differ, may_grow, defaults). Without a saved
  config.toml (a new folder) there is nothing to compare. A RunFolderError names every key
  that differs, old -> new, and the fixes; it is raised before the folder is written.
  """
  path = os.path.join(folder, CONFIG_FILE)
  if not os.path.isfile(path):
    return
  try:
    with open(path, 'rb') as f:
      saved = tomllib.load(f)
  except (OSError, ValueError) as e:   # TOMLDecodeError and UnicodeDecodeError are ValueErrors
    raise RunFolderError(
        f'{path} (the settings of the run in {folder}) cannot be read ({short_error(e)}); '
        f'restore it, use a new --output_dir, or delete {folder} to start over.') from None
  changes = settings_changes(saved, current, **rules)
  if changes:
    renamed = any(change.endswith(f'-> ({UNKNOWN})') for change in changes)   # its rule, once
    raise RunFolderError(
        f'{folder} holds a run with other settings, which change what it computes: '
        f'{"; ".join(changes)}. Resuming would mix two runs. Rerun with the settings of {path}, '
        + (RENAME_HINT.format(folder=folder) + ', ' if renamed else '')
        + f'use a new --output_dir, or delete {folder} to start over.')


def claim_for_resume(folder: str, current: Mapping[str, Any], **rules) -> None:
  """`check_resume`, then `files.claim_folder` (one writer at a time), then `check_resume`
  again: a refused command leaves the folder as it was (its .lock file too), and the second
  check sees a config.toml that another run wrote in between."""
  check_resume(folder, current, **rules)
  files.claim_folder(folder)
  check_resume(folder, current, **rules)
