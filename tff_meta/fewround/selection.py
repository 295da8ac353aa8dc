"""The deployed model of a preparing stage, chosen on validation classes (issue #14).

A preparing stage's last model need not be its best: FRL's meta-train query
accuracy can fall in the second half of a run (docs/RESULTS.md of 3ab6296, §9a, seed 1),
and Park et al. fix T without saying how. Few-shot practice stops on
validation classes (Snell et al. 2017, Sec. 3.1: "we use the validation set
for early stopping"). With `select_every > 0`, once a stage has finished,
every kept checkpoint whose version is a multiple of `select_every`, and the
last one, is deployed on `select_episodes` episodes of the VALIDATION classes
at R = `rounds` (the same seeded episodes for every candidate and every
method), and the one with the best mean accuracy is deployed on the test
classes (the earliest on ties: the smaller budget). The test classes play no
part. The scores are kept in <stage>/selection_<episodes>.csv, which a rerun
reads back instead of scoring again.

The candidates are the stage's own checkpoints (`training.KEEP_ALL` keeps
them), so selection changes nothing in training: a run with selection trains
exactly as one without.
"""

from __future__ import annotations

import asyncio
import csv
import os
from typing import Any, Callable, Dict, Tuple

import tensorflow_federated as tff

from tff_meta.config_file import ConfigError
from tff_meta.fewround import training
from tff_meta.program import checkpoints, files
from tff_meta.run_folder import CHECKPOINTS_DIR

VALIDATION_STREAM = 3   # episode seeds (seed, stream, i); 0-2 are baselines' train/pretrain/test


def _read(path: str) -> Dict[int, float]:
  if not os.path.exists(path):
    return {}
  with open(path, newline='', encoding='utf-8') as f:
    return {int(r['version']): float(r['validation_accuracy']) for r in csv.DictReader(f)}


def _write(path: str, scores: Dict[int, float]) -> None:
  lines = ['version,validation_accuracy'] + [f'{v},{a!r}' for v, a in sorted(scores.items())]
  files.write_text(path, '\n'.join(lines) + '\n')


def select(run_dir: str, initial: Any, what: str, unit: str, every: int, last: int,
           episodes: int, score: Callable[[Any], float]) -> Tuple[Any, Dict[str, Any]]:
  """(the chosen checkpoint's state, info for results.json) of the stage in `run_dir`.

  `initial` gives the checkpoints' structure, `score(state)` a candidate's mean
  validation accuracy, `last` the stage's final version (always a candidate).
  """
  root = os.path.join(run_dir, CHECKPOINTS_DIR)
  manager = tff.program.FileProgramStateManager(root, keep_total=training.KEEP_ALL)
  versions = set(asyncio.run(manager.get_versions()) or [])
  candidates = sorted(v for v in versions if v % every == 0 or v == last)
  if last not in versions:
    raise ConfigError(f'{root} has no checkpoint of {unit} {last}, the end of {what}; '
                      'selection needs the finished stage.')
  path = os.path.join(run_dir, f'selection_{episodes}.csv')
  scores = {v: a for v, a in _read(path).items() if v in candidates}

  def load(version):
    return asyncio.run(checkpoints.load_latest(manager, root, initial, what, unit=unit,
                                               version=version))[0]

  for version in candidates:
    if version not in scores:
      scores[version] = float(score(load(version)))
      _write(path, scores)   # after each candidate: a stopped run keeps what it scored
  best = max(candidates, key=lambda v: (scores[v], -v))
  info = {f'selected_{unit}': best, 'selection_validation_accuracy': scores[best],
          'validation_curve': {str(v): scores[v] for v in candidates}}
  return load(best), info
