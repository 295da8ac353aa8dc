"""Deployment (testing) of few-round learning: R rounds of FL on unseen classes.

FRL (Park et al., `../shared/papers/001_*.txt`, Sec. 3.3): from phi_T the
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

Type signature of the evaluation (G = round state, D = client data):
    evaluate: (<G@SERVER, {D}@CLIENTS> -> <loss_sum,correct,num_examples>@SERVER)
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tqdm


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


def test_episodes(computations, weights, sample_episode: Callable[[int], list],
                  num_episodes: int, rounds: Sequence[int], progress: bool = False,
                  desc: str = 'test', episode_fn: Optional[Callable] = None
                  ) -> Dict[int, Summary]:
  """Mean accuracy ± 95% CI over `num_episodes` test episodes, per round count.

  Args:
    computations: (start, round, evaluate) from `process.build_round`.
    weights: the deployed initial model (phi_T, or a baseline's).
    sample_episode: episode index -> the K test clients.
    episode_fn: runs one episode, with `deploy_episode`'s signature (the
      default); one-shot FL's CV selection is another (`oneshot.CVSelection`).
  """
  episode_fn = episode_fn or deploy_episode
  per_round: Dict[int, List[float]] = {r: [] for r in rounds}
  for i in tqdm.trange(num_episodes, desc=desc, disable=not progress, leave=False):
    for r, acc in episode_fn(*computations, weights, sample_episode(i), rounds).items():
      per_round[r].append(acc)
  return {r: mean_ci(v) for r, v in per_round.items()}
