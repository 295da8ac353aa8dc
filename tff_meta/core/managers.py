"""The tff.program managers of a run folder, built in one place for every loop.

The image tasks' training loop (`training_loop.py`), few-round learning's
episode loops (`fewround/training.py`) and the recommendation episode loop
(`recommendation/loop.py`) keep their state and metrics the same way:

- `restore`: a `tff.program.FileProgramStateManager` under
  `<folder>/checkpoints` and the newest checkpoint in it, read through
  `checkpoints.load_latest` (plain errors for a damaged or foreign one);
- `metric_releases`: a `tff.program.CSVFileReleaseManager` (one row per key;
  a release drops the rows at and past its key, so a resumed run writes no
  duplicates) and a `tff.program.TensorBoardReleaseManager`, grouped.

The file names come from `tff_meta.core.run_folder`.
"""

from __future__ import annotations

import os
from typing import Any, Tuple

import tensorflow_federated as tff

from tff_meta.core import checkpoints
from tff_meta.core.run_folder import CHECKPOINTS_DIR


def metric_releases(folder: str, csv_file: str, tensorboard_dir: str,
                    key: str) -> tff.program.GroupingReleaseManager:
  """Releases to `<folder>/<csv_file>` (keyed by the column `key`) and `<folder>/<tensorboard_dir>`."""
  return tff.program.GroupingReleaseManager([
      tff.program.CSVFileReleaseManager(os.path.join(folder, csv_file), key_fieldname=key),
      tff.program.TensorBoardReleaseManager(os.path.join(folder, tensorboard_dir)),
  ])


async def restore(folder: str, initial: Any, what: str, *, unit: str, keep_total: int
                  ) -> Tuple[tff.program.FileProgramStateManager, Any, int]:
  """(state manager, state, version) of `<folder>/checkpoints`: the newest checkpoint and its
  version, or `initial` and 0 when there is none. The manager keeps the newest `keep_total`
  checkpoints; `what` and `unit` name the run and what a version counts in errors."""
  root = os.path.join(folder, CHECKPOINTS_DIR)
  manager = tff.program.FileProgramStateManager(root, keep_total=keep_total)
  state, version = await checkpoints.load_latest(manager, root, initial, what, unit=unit)
  return manager, (initial if state is None else state), version
