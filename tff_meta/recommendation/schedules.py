"""Schedules of the trained methods' outer rate over the episodes (`lr_schedule`).

One key moves both outer rates the same way, so the comparison stays fair:
`server_lr` (beta, the meta-update of MAML / Meta-SGD, Chen et al. 2018b
Alg. 1) and `pretrain_lr` (the pre-training steps of NN(pre-trained) /
NN-unified). The inner rate (alpha) and the test-time adaptation are not
scheduled. The papers keep the rate constant; they give no schedule.

- `constant`: the base rate at every episode (the papers).
- `cosine`: at episode e of E (1-based), rate x (1 + cos(pi (e - 1) / E)) / 2:
  the base rate at episode 1, falling smoothly towards 0 at E (cosine
  annealing without restarts, Loshchilov & Hutter 2017, "SGDR"). E is the
  run's episode count, so a run stopped by validation (`select_on`) still
  chooses along the one decaying curve it ran.

The rate lives in the optimizer state of `tff.learning.optimizers`
(`learning_rate`), for the FedMeta process's server optimizer and the
plain-TF `Trainer` alike; `with_rate` sets it there before each episode's
step, so checkpoints and resumed runs need nothing more.
"""

from __future__ import annotations

import collections
import math
from typing import Callable, Mapping

import numpy as np

from tff_meta.core.registry import Registry

# name -> (base rate, episode e in 1..E, E) -> the rate of episode e.
SCHEDULES: Registry[Callable[[float, int, int], float]] = Registry('lr_schedule')
SCHEDULES.add('constant', lambda base, episode, total: base)
SCHEDULES.add('cosine', lambda base, episode, total:
              base * 0.5 * (1.0 + math.cos(math.pi * (episode - 1) / total)))

RATE_KEY = 'learning_rate'


def rate(name: str, base: float, episode: int, total: int) -> float:
  """The rate of `episode` (1-based) of `total` under schedule `name`."""
  return SCHEDULES.get(name)(base, episode, total)


def with_rate(optimizer_state: Mapping, value: float) -> collections.OrderedDict:
  """A copy of a `tff.learning.optimizers` state with its learning rate set to `value`."""
  if RATE_KEY not in optimizer_state:
    raise ValueError(f'optimizer state has no {RATE_KEY!r}: {sorted(optimizer_state)}')
  out = collections.OrderedDict(optimizer_state)
  out[RATE_KEY] = np.asarray(value, dtype=np.asarray(optimizer_state[RATE_KEY]).dtype)
  return out
