"""The loops that drive the few-round computations: meta-training and pre-training.

- `meta_train`: T episodes of FRL Algorithm 1 (each 1 + R rounds, one
  federated computation per round; `process.run_episode`).
- `federated_pretrain`: plain FedAvg rounds of a linear model on the
  meta-train classes (the "preparing stage" of the fine-tuning baselines,
  Sec. 4), using the same `round` computation; under the same communication
  budget as FRL, T * (R + 1) rounds.
Both take a `sample(i)` callable giving round/episode i's K clients, so every
method sees the same seeded episodes.
"""

from __future__ import annotations

from typing import Callable, List

import numpy as np
import tqdm

from tff_meta.fewround import process as process_lib


def meta_train(process, sample: Callable[[int], list], episodes: int, progress: bool = False,
               desc: str = 'meta-train'):
  """Returns (phi_T as numpy arrays, per-episode query accuracy before the meta-step)."""
  state = process.initialize()
  history: List[float] = []
  bar = tqdm.trange(episodes, desc=desc, disable=not progress, leave=False)
  for e in bar:
    state, metrics = process_lib.run_episode(process, state, sample(e))
    history.append(float(metrics['correct']) / max(float(metrics['num_examples']), 1.0))
    if progress and e % 10 == 0:
      bar.set_postfix(query_acc=f'{np.mean(history[-50:]):.3f}')
  return [np.asarray(w) for w in state['phi']], history


def federated_pretrain(computations, weights, sample: Callable[[int], list], rounds: int,
                       progress: bool = False, desc: str = 'pre-train'):
  """FedAvg for `rounds` rounds from `weights`; returns the final weights (numpy)."""
  start, round_fn, _ = computations
  theta = weights
  for r in tqdm.trange(rounds, desc=desc, disable=not progress, leave=False):
    state, _ = round_fn(start(theta), sample(r))    # new clients every round
    theta = state['theta']
  return [np.asarray(w) for w in theta]
