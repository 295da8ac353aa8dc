"""The run folder's tff.program managers: restoring checkpoints and releasing metric rows."""

import asyncio
import csv

import numpy as np

from tff_meta.core import managers
from tff_meta.core.run_folder import CHECKPOINTS_DIR, METRICS_FILE, TENSORBOARD_DIR


def test_restore_gives_the_initial_state_then_the_newest_checkpoint(tmp_path):
  initial = {'w': np.zeros(2, np.float32)}
  manager, state, version = asyncio.run(
      managers.restore(str(tmp_path), initial, 'toy', unit='episode', keep_total=2))
  assert state is initial and version == 0
  for v in (1, 2, 3):
    asyncio.run(manager.save({'w': np.full(2, v, np.float32)}, v))
  _, state, version = asyncio.run(
      managers.restore(str(tmp_path), initial, 'toy', unit='episode', keep_total=2))
  assert version == 3
  np.testing.assert_array_equal(state['w'], [3, 3])
  assert (tmp_path / CHECKPOINTS_DIR / 'program_state_3').is_dir()


def test_metric_releases_key_the_csv_and_replace_rows_past_a_resumed_key(tmp_path):
  release = managers.metric_releases(str(tmp_path), METRICS_FILE, TENSORBOARD_DIR, 'step')
  for step in (1, 2, 3):
    asyncio.run(release.release({'loss': float(step) / 4}, key=step))
  release = managers.metric_releases(str(tmp_path), METRICS_FILE, TENSORBOARD_DIR, 'step')
  asyncio.run(release.release({'loss': 9.0}, key=2))    # a run resumed after step 1
  with open(tmp_path / METRICS_FILE, newline='') as f:
    rows = list(csv.DictReader(f))
  assert rows == [{'step': '1', 'loss': '0.25'}, {'step': '2', 'loss': '9.0'}]
  assert any((tmp_path / TENSORBOARD_DIR).iterdir())
