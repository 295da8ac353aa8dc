"""The recommendation episode loop: `core/loop.py` with an evaluation curve.

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

from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from tff_meta.core.run_folder import CURVE_FILE, TENSORBOARD_EVAL_DIR
from tff_meta.core import loop as checkpointed

better = checkpointed.better


class Selected(NamedTuple):
  """The kept state and the episode whose evaluation chose it (see module doc)."""
  state: object
  episode: int


def select_best(curve: List[Dict[str, float]], metric: str, mode: str) -> int:
  """The episode of the best `metric` in curve rows (the earliest of ties)."""
  return checkpointed.select_best(curve, metric, mode, 'episode')


def run_episodes(*, name: str, initial_state, step: Callable, evaluate: Callable,
                 episodes: int, eval_every: int, checkpoint_every: int, output_dir: str,
                 show_progress: bool = True, select: Optional[Tuple[str, str]] = None):
  """Runs `state = step(state, episode)` for episodes 1..N; returns (state, curve rows)
  or, with `select=(metric, mode)`, (state, curve rows, `Selected`).

  `evaluate(state) -> {metric: value}`; the curve rows carry `episode` first.
  """
  result = checkpointed.run_sync(
      name=name, folder=output_dir, initial=initial_state,
      step=lambda state, episode: (step(state, episode), None), total=episodes,
      checkpoint_every=checkpoint_every, keep_total=2, unit='episode',
      evaluation=checkpointed.Evaluation(
          evaluate=lambda state, _: evaluate(state),
          evaluates=lambda e: e % eval_every == 0 or e == episodes,
          csv_file=CURVE_FILE, tensorboard_dir=TENSORBOARD_EVAL_DIR, allow_blank=False),
      select=select, show_progress=show_progress,
      postfix=lambda _, row, __: {k: f'{v:.4f}' for k, v in list((row or {}).items())[:2]})
  if select:
    return result.state, result.evaluations, Selected(*result.selected)
  return result.state, result.evaluations
