"""Deployment (testing) of few-round learning: R rounds of FL on unseen classes.

FRL (Park et al., "Few-Round Learning for Federated Learning", Sec. 3.3): from phi_T the
server sets theta_0 = phi_T, runs R rounds of federated learning with the
test clients' support sets (the `round` computation of `process.py`), and
predicts each query example with theta_R: by its nearest global prototype in
P_{R-1} (distance classifier) or with the linear head. With the config's
`test_prototypes = "recomputed"` the distance classifier uses P_R instead,
the prototypes the clients compute at theta_R (`process.TEST_PROTOTYPES`). The accuracy of a test
episode is over all its query examples; the reported number is the mean over
many sampled test episodes with a 95% confidence interval
(1.96 * std / sqrt(episodes), as in the few-shot literature).

A model meta-trained for R = 3 can be tested after fewer rounds (Tables 3,
A.1, B.1, B.2): `test_episodes` runs max(rounds) rounds per episode and
evaluates after each requested r.

A test phase of hundreds of episodes can take an hour on a busy machine, so
`test_episodes` can keep its progress in a file (`progress_file`, rewritten
atomically every `SAVE_EVERY` episodes). A stopped test resumes after the
last saved episode, and ends with the numbers an uninterrupted test gives:
test episode i is drawn from (seed, stream, i), and the file is used only when
it was written for the same deployed weights, round counts and `fingerprint`
(the caller's name for everything else that shapes the episodes).

Type signature of the evaluation (G = round state, D = client data):
    evaluate: (<G@SERVER, {D}@CLIENTS> -> <loss_sum,correct,num_examples>@SERVER)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tqdm

from tff_meta.core import files

SAVE_EVERY = 10   # test episodes between two saves of the progress file


@dataclasses.dataclass
class Summary:
  """Accuracy over test episodes."""
  mean: float
  ci95: float
  episodes: int
  accuracies: List[float]

  def __str__(self) -> str:
    return f'{100 * self.mean:.2f}% ± {100 * self.ci95:.2f}'


def mean_ci(values: Sequence[float]) -> Summary:
  """Mean and the half-width of its normal 95% confidence interval."""
  values = np.asarray(values, np.float64)
  if values.size == 0:
    raise ValueError('no test episodes to summarize.')
  half = 1.96 * values.std(ddof=1) / np.sqrt(values.size) if values.size > 1 else float('nan')
  return Summary(float(values.mean()), float(half), int(values.size), values.tolist())


def deploy_episode(start, round_fn, evaluate, weights, clients, rounds: Sequence[int]
                   ) -> Dict[int, float]:
  """Runs max(rounds) rounds from `weights`; query accuracy after each r in `rounds`.

  `rounds` holds communication rounds r >= 1 (after round r the server has
  theta_r and P_{r-1}; `evaluate` may recompute P_r for scoring, and the
  next round goes on from the server's own state).
  """
  if not rounds or min(rounds) < 1:
    raise ValueError(f'test rounds must be >= 1, got {list(rounds)}.')
  state = start(weights)
  out = {}
  for r in range(1, max(rounds) + 1):
    state, _ = round_fn(state, clients)
    if r in rounds:
      sums = evaluate(state, clients)
      out[r] = float(sums['correct']) / max(float(sums['num_examples']), 1.0)
  return out


def progress_key(weights, rounds: Sequence[int], fingerprint: str) -> str:
  """What a progress file must have been written for: a digest of the deployed weights
  (shapes, dtypes and bytes), the round counts and the caller's fingerprint."""
  digest = hashlib.sha256()
  for w in weights:
    w = np.ascontiguousarray(w)
    digest.update(f'{w.dtype.str}{w.shape}'.encode())
    digest.update(w.tobytes())
  return json.dumps({'weights': digest.hexdigest(), 'rounds': sorted(int(r) for r in rounds),
                     'fingerprint': fingerprint}, sort_keys=True)


def load_progress(path: Optional[str], key: str, rounds: Sequence[int],
                  limit: int) -> Dict[int, List[float]]:
  """The saved per-round accuracies of the first episodes (at most `limit`), when `path`
  holds progress written under `key`; empty lists otherwise (no file, another test, or a
  file that cannot be read: the test then starts from its first episode)."""
  empty = {r: [] for r in rounds}
  if not path or not os.path.exists(path):
    return empty
  try:
    with open(path, encoding='utf-8') as f:
      saved = json.load(f)
    if saved['key'] != key:
      return empty
    per_round = {r: [float(a) for a in saved['accuracy'][str(r)]] for r in rounds}
  except (OSError, ValueError, KeyError, TypeError):
    return empty
  done = min(min(len(v) for v in per_round.values()), limit)
  return {r: v[:done] for r, v in per_round.items()}


def test_episodes(computations, weights, sample_episode: Callable[[int], list],
                  num_episodes: int, rounds: Sequence[int], progress: bool = False,
                  desc: str = 'test', episode_fn: Optional[Callable] = None,
                  progress_file: Optional[str] = None, fingerprint: str = ''
                  ) -> Dict[int, Summary]:
  """Mean accuracy ± 95% CI over `num_episodes` test episodes, per round count.

  Args:
    computations: (start, round, evaluate) from `process.build_round`.
    weights: the deployed initial model (phi_T, or a baseline's).
    sample_episode: episode index -> the K test clients.
    episode_fn: runs one episode, with `deploy_episode`'s signature (the
      default); one-shot FL's CV selection is another (`oneshot.CVSelection`).
    progress_file: where to keep the finished episodes' accuracies, so that a
      stopped test resumes after the last saved one (module docstring); None
      keeps nothing.
    fingerprint: everything but the weights and rounds that decides the test
      episodes and how they are played (the caller's config and method).
  """
  episode_fn = episode_fn or deploy_episode
  key = progress_key(weights, rounds, fingerprint) if progress_file else ''
  per_round = load_progress(progress_file, key, rounds, num_episodes)
  first = len(per_round[rounds[0]]) if rounds else 0
  if first:
    print(f'{desc}: resuming after test episode {first} of {num_episodes} ({progress_file})',
          flush=True)

  def save():
    files.write_json(progress_file, {'key': key, 'accuracy': {
        str(r): v for r, v in per_round.items()}})

  for i in tqdm.trange(first, num_episodes, initial=first, total=num_episodes, desc=desc,
                       disable=not progress, leave=False):
    for r, acc in episode_fn(*computations, weights, sample_episode(i), rounds).items():
      per_round[r].append(acc)
    if progress_file and ((i + 1) % SAVE_EVERY == 0 or i + 1 == num_episodes):
      save()
  return {r: mean_ci(v) for r, v in per_round.items()}
