"""The loops that drive the few-round computations: meta-training and pre-training.

- `meta_train`: T episodes of FRL Algorithm 1 (each 1 + R rounds, one
  federated computation per round; `process.run_episode`). Per episode it
  records the meta-train query loss and accuracy of theta_R before the
  meta-step (line 24's L^{Q_k}, summed over the K clients), the support loss
  of every round r (Eq. 4 at theta_r) and beta.
- `federated_pretrain`: plain FedAvg rounds of a linear model on the
  meta-train classes (the "preparing stage" of the fine-tuning baselines,
  Sec. 4), using the same `round` computation; under the same communication
  budget as FRL, T * (R + 1) rounds. Per round it records the support loss.
Both take a `sample(i)` callable giving round/episode i's K clients, so every
method sees the same seeded episodes, and so a resumed run sees the episodes
it would have seen.

With a `run_dir`, both run on the one checkpointed loop (`checkpointed_loop`,
`core/loop.py`): the metrics go to
<run_dir>/metrics.csv and <run_dir>/tensorboard through tff.program's release
managers, and the state (phi and the Adam slots, or the pre-trained weights)
to <run_dir>/checkpoints through `tff.program.FileProgramStateManager` every
`checkpoint_every` steps and at the end, all of them kept (`KEEP_ALL`). A
stopped or killed run restarts after its last checkpoint; rows released
after it are dropped from metrics.csv before new ones are written,
and since every episode's data is seeded by its index, the resumed run ends
in the state an uninterrupted run reaches.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import tqdm

from tff_meta.fewround import meta_update as meta_lib
from tff_meta.fewround import process as process_lib
from tff_meta.core.run_folder import METRICS_FILE, TENSORBOARD_DIR, read_by_key
from tff_meta.core import loop as checkpointed

Row = Dict[str, float]
# Every checkpoint is kept (0 = no limit in tff.program.FileProgramStateManager):
# a few-round state is small (the Conv4's phi and its Adam slots, about 0.3 MB),
# and the intermediate models of a finished run stay there to be scored again.
KEEP_ALL = 0


def _ratio(total, key: str, count: str = 'num_examples') -> float:
  n = float(total[count])
  return float(total[key]) / n if n > 0 else float('nan')


def checkpointed_loop(name: str, run_dir: Optional[str], key: str, initial,
                      step: Callable[[object, int], Tuple[object, Row]], total: int,
                      checkpoint_every: int = 50, progress: bool = False):
  """`state, row = step(state, i)` for i in [0, total); returns the final state.

  Row i is released with key i + 1 (metrics.csv's `key` column); the state
  is saved as version i + 1. Without `run_dir` nothing is written.
  """
  if run_dir is None:
    state = initial
    for i in tqdm.trange(total, desc=name, disable=not progress, leave=False):
      state, _ = step(state, i)
    return state

  def timed(state, n):
    t0 = time.perf_counter()
    state, row = step(state, n - 1)
    row['seconds'] = time.perf_counter() - t0
    return state, row

  return checkpointed.run_sync(
      name=name, folder=run_dir, initial=initial, step=timed, total=total,
      checkpoint_every=checkpoint_every, keep_total=KEEP_ALL, unit=key,
      step_file=METRICS_FILE, step_tensorboard=TENSORBOARD_DIR, show_progress=progress,
      postfix=lambda row, _, __: {k: f'{v:.3f}' for k, v in list(row.items())[:2]}).state


def episode_row(process, state, round_metrics, metrics) -> Row:
  """The per-episode metrics of meta-training (metrics.csv / TensorBoard)."""
  row = collections.OrderedDict(
      query_accuracy=_ratio(metrics, 'correct'), query_loss=_ratio(metrics, 'loss_sum'))
  for r, m in enumerate(round_metrics):
    row[f'support_loss_round{r}'] = _ratio(m, 'loss_sum')
  row['meta_lr'] = float(meta_lib.meta_lr(process.hparams, np.int32(state['episode'])))
  row['accepted_examples'] = float(metrics['num_examples'])
  return row


def meta_train(process, sample: Callable[[int], list], episodes: int, progress: bool = False,
               desc: str = 'meta-train', run_dir: Optional[str] = None,
               checkpoint_every: int = 50):
  """Returns (phi_T as numpy arrays, per-episode query accuracy before the meta-step).

  With `run_dir` the history is the whole run's (read back from metrics.csv,
  so a resumed run reports every episode, not only those since the resume).
  """
  history: List[float] = []

  def step(state, e):
    round_metrics = []
    new_state, metrics = process_lib.run_episode(process, state, sample(e), round_metrics)
    row = episode_row(process, state, round_metrics, metrics)
    history.append(row['query_accuracy'])
    return new_state, row

  state = checkpointed_loop(desc, run_dir, 'episode', process.initialize(), step, episodes,
                            checkpoint_every, progress)
  if run_dir is not None:
    by_episode = read_by_key(os.path.join(run_dir, METRICS_FILE), 'episode', 'query_accuracy')
    history = [by_episode[e] for e in sorted(by_episode)]
  return [np.asarray(w) for w in state['phi']], history


def federated_pretrain(computations, weights, sample: Callable[[int], list], rounds: int,
                       progress: bool = False, desc: str = 'pre-train',
                       run_dir: Optional[str] = None, checkpoint_every: int = 50):
  """FedAvg for `rounds` rounds from `weights`; returns the final weights (numpy)."""
  start, round_fn, _ = computations

  def step(theta, r):
    state, metrics = round_fn(start(theta), sample(r))    # new clients every round
    return [np.asarray(w) for w in state['theta']], {'train_loss': _ratio(metrics, 'loss_sum')}

  theta = checkpointed_loop(desc, run_dir, 'round', [np.asarray(w) for w in weights], step,
                            rounds, checkpoint_every, progress)
  return [np.asarray(w) for w in theta]
