"""Loading a run's latest checkpoint, with plain errors for every way it can be wrong.

`tff.program.FileProgramStateManager` writes each checkpoint to a temporary
folder and renames it, so a killed run leaves no half-written
`program_state_<round>` folder (its `_temp<n>` leftovers are not versions).
What it cannot guard against is a folder damaged later (truncated, emptied,
overwritten) or one written by another configuration. `load_latest` names
each case:

- `CheckpointError`: the checkpoints path is a file, or the latest checkpoint
  cannot be read. The message names the folder and the fix (delete it to
  resume from the previous checkpoint, or start over in a new output folder).
  Nothing is changed on disk.
- `IncompatibleCheckpointError`: it reads, but its structure, shapes or
  dtypes differ from this run's state (another algorithm, model or optimizer).
"""

from __future__ import annotations

import os
import tomllib
from typing import Any, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.program import file_utils

from tff_meta.core import run_folder
from tff_meta.core.config_file import OLD_KEYS
from tff_meta.core.run_folder import CHECKPOINTS_DIR, CONFIG_FILE


class CheckpointError(RuntimeError):
  """A damaged checkpoint folder; the message names it and the fix."""


class IncompatibleCheckpointError(RuntimeError):
  """A checkpoint of a different algorithm, model or optimizer."""


def _leaf_signature(value) -> Tuple[Tuple[int, ...], str]:
  array = np.asarray(value)
  return array.shape, array.dtype.kind


async def load_latest(manager: tff.program.FileProgramStateManager, root: str, initial: Any,
                      what: str, unit: str = 'round',
                      version: Optional[int] = None) -> Tuple[Any, int]:
  """(state, version) of the newest checkpoint under `root`, or (None, 0) if there is none.

  `what` names the run's algorithm in messages; `unit` what a version counts.
  `version` asks for that checkpoint instead of the newest (a CheckpointError
  lists the ones there are when it is missing).
  """
  if os.path.exists(root) and not os.path.isdir(root):
    raise CheckpointError(f'{root} is a file, but this run keeps its checkpoints in a folder '
                          'there; move the file away or choose another --output_dir.')
  versions = sorted(await manager.get_versions() or [])
  if not versions:
    return None, 0
  if version is not None and version not in versions:
    raise CheckpointError(f'{root} has no checkpoint of {unit} {version}; it has {unit}s '
                          f'{", ".join(map(str, versions))}.')
  latest = versions[-1] if version is None else version
  path = os.path.join(root, f'program_state_{latest}')
  earlier = [v for v in versions if v < latest]
  previous = (f'to resume from {unit} {earlier[-1]} (the previous checkpoint)'
              if earlier else 'to start over')
  fix = f'Delete that folder {previous}, or use a new --output_dir to start over.'
  try:
    await file_utils.read_saved_model(path)
  except Exception as e:  # pylint: disable=broad-except  # TF raises many types on damaged files
    raise CheckpointError(f'The checkpoint {path} cannot be read: it is truncated, emptied or '
                          f'not a TFF checkpoint ({run_folder.short_error(e)}). {fix}') from None
  mismatch = (f'The checkpoint {path} does not match {what} with this configuration '
              '(different algorithm, model or optimizer?)')
  start_over = f'Use a new --output_dir, or delete {root} to start over.'
  try:
    state = await manager.load(latest, initial)
  except (ValueError, TypeError) as e:
    raise IncompatibleCheckpointError(
        f'{mismatch}: {run_folder.short_error(e)}. {start_over}') from None
  try:
    got = [_leaf_signature(v) for v in tf.nest.flatten(state)]
    want = [_leaf_signature(v) for v in tf.nest.flatten(initial)]
  except (TypeError, ValueError):
    got = want = None   # a structure tf.nest cannot flatten: the structure check above stands
  if got is not None and got != want:
    diff = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    raise IncompatibleCheckpointError(
        f'{mismatch}: value {diff} has shape/kind {got[diff] if diff < len(got) else None}, '
        f'this run expects {want[diff] if diff < len(want) else None}. {start_over}')
  return state, int(latest)


def check_same_run(output_dir: str, keys: Sequence[str], current: dict,
                   config_file: str = CONFIG_FILE) -> None:
  """Refuses to resume a checkpoint that another configuration wrote.

  When `output_dir` has checkpoints and the config it saved differs from
  `current` in one of `keys` (e.g. algorithm, dataset, model), resuming would
  mix two runs (or load a same-shaped state of another algorithm). Checked
  before anything is written. A saved key that was renamed since
  (`config_file.OLD_KEYS`) is refused with its new name: the file is to be
  rewritten once, as the committed run folders were.
  """
  checkpoints = os.path.join(output_dir, CHECKPOINTS_DIR)
  saved_path = os.path.join(output_dir, config_file)
  if not (os.path.isdir(checkpoints) and any(
      n.startswith('program_state_') for n in os.listdir(checkpoints))):
    return
  if not os.path.isfile(saved_path):
    return
  try:
    with open(saved_path, 'rb') as f:
      saved = tomllib.load(f)
  except (OSError, ValueError) as e:   # TOMLDecodeError and UnicodeDecodeError are ValueErrors
    raise CheckpointError(
        f'{saved_path} (the config of the checkpointed run in {output_dir}) cannot be read '
        f'({run_folder.short_error(e)}); use a new --output_dir, or delete {output_dir} '
        'to start over.') from None
  for key in saved:
    if key in OLD_KEYS:
      raise IncompatibleCheckpointError(
          f'{saved_path}: key {key!r} was renamed {OLD_KEYS[key]!r}; rename it there (same '
          'meaning) to resume this run.')
  differ = [k for k in keys if k in saved and saved[k] != current.get(k)]
  if differ:
    was = ', '.join(f'{k}={saved[k]!r}' for k in differ)
    now = ', '.join(f'{k}={current.get(k)!r}' for k in differ)
    raise IncompatibleCheckpointError(
        f'{output_dir} holds the checkpoints of another run ({was}; this run has {now}). '
        f'Use a new --output_dir, or delete {checkpoints} to start over there.')



def check_csv(path: str, key: str, allow_blank: bool = True) -> None:
  """Checks a run's metric CSV (metrics.csv, eval.csv) before the run appends to it.

  It must be UTF-8 CSV with a `key` column and numbers (or blanks, if
  `allow_blank`) everywhere, as the release managers write it; a CheckpointError
  names the file, the line and the fix. A missing file is fine (a new run).
  """
  if not os.path.lexists(path):
    return
  folder = os.path.dirname(path) or '.'
  fix = (f'delete it and {os.path.join(folder, CHECKPOINTS_DIR)} to start over, or use a new '
         '--output_dir.')
  fields, rows = run_folder.csv_rows(path, CheckpointError, fix)
  if key not in fields:
    raise CheckpointError(f'{path} has no {key!r} column (it is not this program\'s metric '
                          f'file, or it was damaged); {fix}')
  for line, row in rows:
    try:
      for name, value in row.items():
        if value != '' or name == key or not allow_blank:
          float(value)
    except ValueError:
      raise run_folder.not_a_number(path, line, CheckpointError, fix) from None
