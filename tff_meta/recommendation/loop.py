"""Episode loop with tff.program checkpoints, a metric curve and a progress bar.

Meta-training (one TFF round of the FedMeta process per episode) and the
baselines' pre-training (one plain-TF step per episode) both run here:

- the state is saved with `tff.program.FileProgramStateManager` every
  `checkpoint_every` episodes and at the end; a rerun resumes after the last
  checkpoint and drops curve rows past it (no duplicates);
- every `eval_every` episodes (and at 0 and at the end) `evaluate(state)`
  gives a row of metrics appended to `curve.csv` (Chen et al. 2018b, Fig. 2);
- a tqdm bar shows the episode and the last metrics.
"""

from __future__ import annotations

import asyncio
import csv
import os
import sys
from typing import Callable, Dict, List

import tensorflow_federated as tff

from tff_meta.program import checkpoints, files


def read_curve(path: str) -> List[Dict[str, float]]:
  if not os.path.exists(path):
    return []
  with open(path, newline='') as f:
    return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _write_curve(path: str, rows: List[Dict[str, float]]) -> None:
  if not rows:
    return
  with files.atomic_open(path, 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def run_episodes(*, name: str, initial_state, step: Callable, evaluate: Callable,
                 episodes: int, eval_every: int, checkpoint_every: int, output_dir: str,
                 show_progress: bool = True):
  """Runs `state = step(state, episode)` for episodes 1..N; returns (state, curve rows).

  `evaluate(state) -> {metric: value}`; the curve rows carry `episode` first.
  """
  os.makedirs(output_dir, exist_ok=True)
  manager = tff.program.FileProgramStateManager(os.path.join(output_dir, 'checkpoints'),
                                                keep_total=2)
  checkpoints.check_csv(os.path.join(output_dir, 'curve.csv'), 'episode', allow_blank=False)
  state, start = asyncio.run(checkpoints.load_latest(
      manager, os.path.join(output_dir, 'checkpoints'), initial_state, name, unit='episode'))
  if state is None:
    state, start = initial_state, 0
  else:
    print(f'Resuming {name} from episode {start} ({output_dir}).', file=sys.stderr)
  curve_path = os.path.join(output_dir, 'curve.csv')
  curve = [r for r in read_curve(curve_path) if r['episode'] <= start]
  if start == 0:
    curve = [{'episode': 0.0, **evaluate(state)}]
  _write_curve(curve_path, curve)
  bar = None
  if show_progress:
    from tqdm import tqdm  # pylint: disable=g-import-not-at-top
    bar = tqdm(total=episodes, initial=start, desc=name, file=sys.stderr, dynamic_ncols=True,
               mininterval=1.0 if sys.stderr.isatty() else 10.0)
  for episode in range(start + 1, episodes + 1):
    state = step(state, episode)
    if episode % eval_every == 0 or episode == episodes:
      curve.append({'episode': float(episode), **evaluate(state)})
      _write_curve(curve_path, curve)
      if bar is not None:
        bar.set_postfix({k: f'{v:.4f}' for k, v in list(curve[-1].items())[1:3]}, refresh=False)
    if episode % checkpoint_every == 0 or episode == episodes:
      asyncio.run(manager.save(state, episode))
    if bar is not None:
      bar.update(1)
  if bar is not None:
    bar.close()
  return state, curve
