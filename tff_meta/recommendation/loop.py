"""Episode loop with tff.program checkpoints, a metric curve and a progress bar.

The state and release managers are the training loop's (`program.managers`).

Meta-training (one TFF round of the FedMeta process per episode) and the
baselines' pre-training (one plain-TF step per episode) both run here:

- the state is saved with `tff.program.FileProgramStateManager` every
  `checkpoint_every` episodes and at the end; a rerun resumes after the last
  checkpoint;
- every `eval_every` episodes (and at 0 and at the end) `evaluate(state)`
  gives a row of metrics released to `curve.csv` (Chen et al. 2018b, Fig. 2)
  and to `tensorboard/eval`; a release drops the rows at and past its
  episode, so a resumed run writes no duplicates;
- a tqdm bar shows the episode and the last metrics;
- with `select=(metric, 'min' | 'max')` (model selection, "early stopping"), the
  state with the best evaluated `metric` so far is kept with the episode that
  gave it; it is part of every checkpoint (saved atomically with the current
  state), so a resumed run keeps the best-so-far. The caller evaluates only
  held-out validation users in `evaluate`, so the choice never sees test users.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from tff_meta.core import checkpoints, managers
from tff_meta.core.run_folder import CURVE_FILE, TENSORBOARD_EVAL_DIR, read_history


class Selected(NamedTuple):
  """The kept state and the episode whose evaluation chose it (see module doc)."""
  state: object
  episode: int


def better(value: float, best: float, mode: str) -> bool:
  """Strictly better (ties keep the earlier episode)."""
  return value < best if mode == 'min' else value > best


def select_best(curve: List[Dict[str, float]], metric: str, mode: str) -> int:
  """The episode of the best `metric` in curve rows (the earliest of ties)."""
  best = curve[0]
  for row in curve[1:]:
    if better(row[metric], best[metric], mode):
      best = row
  return int(best['episode'])


def run_episodes(*, name: str, initial_state, step: Callable, evaluate: Callable,
                 episodes: int, eval_every: int, checkpoint_every: int, output_dir: str,
                 show_progress: bool = True, select: Optional[Tuple[str, str]] = None):
  """Runs `state = step(state, episode)` for episodes 1..N; returns (state, curve rows)
  or, with `select=(metric, mode)`, (state, curve rows, `Selected`).

  `evaluate(state) -> {metric: value}`; the curve rows carry `episode` first.
  """
  os.makedirs(output_dir, exist_ok=True)
  curve_path = os.path.join(output_dir, CURVE_FILE)
  checkpoints.check_csv(curve_path, 'episode', allow_blank=False)
  saved = ({'state': initial_state, 'best': initial_state} if select else initial_state)
  manager, saved, start = asyncio.run(managers.restore(
      output_dir, saved, name, unit='episode', keep_total=2))
  state, best = (saved['state'], saved['best']) if select else (saved, None)
  if start:
    print(f'Resuming {name} from episode {start} ({output_dir}).', file=sys.stderr)
  curve = [r for r in read_history(curve_path) if r['episode'] <= start] if start else []
  release = managers.metric_releases(output_dir, CURVE_FILE, TENSORBOARD_EVAL_DIR, 'episode')

  def record(state, episode: int) -> None:
    nonlocal best
    metrics = evaluate(state)
    curve.append({'episode': float(episode), **metrics})
    asyncio.run(release.release(metrics, key=episode))   # drops rows at and past `episode`
    if select and select_best(curve, *select) == episode:
      best = state

  if start == 0:
    record(state, 0)
  bar = None
  if show_progress:
    from tqdm import tqdm  # pylint: disable=g-import-not-at-top
    bar = tqdm(total=episodes, initial=start, desc=name, file=sys.stderr, dynamic_ncols=True,
               mininterval=1.0 if sys.stderr.isatty() else 10.0)
  for episode in range(start + 1, episodes + 1):
    state = step(state, episode)
    if episode % eval_every == 0 or episode == episodes:
      record(state, episode)
      if bar is not None:
        bar.set_postfix({k: f'{v:.4f}' for k, v in list(curve[-1].items())[1:3]}, refresh=False)
    if episode % checkpoint_every == 0 or episode == episodes:
      asyncio.run(manager.save({'state': state, 'best': best} if select else state, episode))
    if bar is not None:
      bar.update(1)
  if bar is not None:
    bar.close()
  if select:
    return state, curve, Selected(best, select_best(curve, *select))
  return state, curve
