"""Accuracy against epsilon: the grid of `research.privacy_curve` (issue #18, item 5).

One cell is (algorithm, seed, target epsilon). Every cell of a seed trains on
the same client split, initial model and client samples, through
`experiment.run` (the training loop of `programs.train`), and differs only in
its privacy keys:

- epsilon = inf: `dp_clip = "adaptive"` with no noise. The clip follows the
  `dp_clip_quantile` (default: the median) of the clients' update norms
  (Andrew et al. 2021, "Differentially private learning with adaptive
  clipping"), so this cell is "clipping only" and its final clip is the rule's
  choice of C for that algorithm and seed.
- a finite target: that fixed clip C, and the noise multiplier z that makes
  the run end at the target (`noise_multiplier_for`: the accountant of
  `program.accounting` for the run's T rounds, m clients per round, N training
  clients and the config's delta). The run's own reported epsilon is checked
  against the target (`check_epsilon`).

Adaptive clipping is not used with noise: TFF's adaptive clip spends noise
0.05 per client on the clipped count, so it needs m > 10 z, and the z of small
epsilons on our populations is far larger (docs/PRIVACY.md).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tff_meta.analysis.tables import seed_std
from tff_meta.core import tables
from tff_meta.classification import accounting

DEFAULT_ALGORITHMS = ('fedavg', 'fedavg_meta', 'fedmeta_maml', 'fedmeta_metasgd')
DEFAULT_EPSILONS = '1,2,4,8,inf'
INF = math.inf
# The accountant's epsilon may sit below the target by the bisection's tolerance
# on z (1% relative), which moves epsilon by a few percent at most.
EPSILON_SLACK = 0.1


class CurveError(ValueError):
  """A bad flag or a cell that did not reach its target (one-line `error:`)."""


def parse_epsilons(text: str) -> List[float]:
  """'1,2,inf' -> [1.0, 2.0, inf], sorted, with inf always in (it sets the clip)."""
  values = set()
  for part in filter(None, (p.strip() for p in text.split(','))):
    try:
      value = float(part)
    except ValueError:
      value = float('nan')
    if not value > 0:
      raise CurveError(f'--epsilons takes targets > 0 or "inf", comma-separated (e.g. '
                       f'--epsilons=1,2,4,8,inf); got {part!r}.')
    values.add(value)
  return sorted(values | {INF})


def parse_seeds(text: str) -> List[int]:
  try:
    seeds = [int(p) for p in text.split(',') if p.strip()]
  except ValueError:
    seeds = [-1]
  if not seeds or min(seeds) < 0:
    raise CurveError(f'--seeds must be integers >= 0, comma-separated (e.g. --seeds=0,1,2); '
                     f'got {text!r}.')
  return sorted(set(seeds))


def label(target: float) -> str:
  return 'inf' if math.isinf(target) else f'{target:g}'


@dataclasses.dataclass(frozen=True)
class Cell:
  algorithm: str
  seed: int
  target: float

  def folder(self, root: str) -> str:
    return os.path.join(root, f'seed{self.seed}', self.algorithm, f'eps_{label(self.target)}')


def cells(algorithms: Sequence[str], seeds: Sequence[int],
          targets: Sequence[float]) -> List[Cell]:
  """Seed by seed, algorithm by algorithm, epsilon = inf first (it sets the clip)."""
  order = sorted(targets, key=lambda t: (not math.isinf(t), t))
  return [Cell(a, s, t) for s in seeds for a in algorithms for t in order]


def noise_multiplier(target: float, *, population: int, clients_per_round: int, rounds: int,
                     delta: float) -> float:
  """z for a run of `rounds` rounds to end at `target` (0 for inf: no noise)."""
  if math.isinf(target):
    return 0.0
  return accounting.noise_multiplier_for(target, population=population,
                                         clients_per_round=clients_per_round, rounds=rounds,
                                         delta=delta)


def cell_overrides(target: float, z: float, clip: Optional[float]) -> Dict[str, Any]:
  """The privacy keys of a cell: adaptive clipping alone at inf, else clip C and noise z."""
  if math.isinf(target):
    return {'dp_clip': 'adaptive', 'dp_noise_multiplier': 0.0}
  if clip is None or not clip > 0:
    raise CurveError(f'the epsilon = {label(target)} cell needs the clip of the epsilon = inf '
                     f'cell, got {clip}.')
  return {'dp_clip': repr(float(clip)), 'dp_noise_multiplier': z}


def check_epsilon(target: float, reported: Optional[float]) -> None:
  """The run's reported epsilon must be the target (inf: inf) within EPSILON_SLACK below."""
  ok = (reported is not None and
        (math.isinf(reported) if math.isinf(target)
         else target * (1 - EPSILON_SLACK) <= reported <= target * (1 + 1e-9)))
  if not ok:
    raise CurveError(f'a run for epsilon = {label(target)} reported epsilon = {reported}; '
                     'the noise multiplier and the run disagree on rounds, clients or delta.')


def final_clip(state: Any) -> float:
  """The `l2_norm_clip` in a server state's `aggregator` entry (the DP query's state)."""
  found = list(_find(state, 'l2_norm_clip'))
  if not found:
    raise CurveError('the server state has no l2_norm_clip: the epsilon = inf cell did not run '
                     'with dp_clip = "adaptive".')
  return float(np.asarray(found[0]))


def _find(value: Any, key: str) -> Iterable[Any]:
  if isinstance(value, Mapping):
    for k, v in value.items():
      if k == key:
        yield v
      else:
        yield from _find(v, key)
  elif hasattr(value, '_asdict'):
    yield from _find(value._asdict(), key)
  elif isinstance(value, (list, tuple)):
    for v in value:
      yield from _find(v, key)


def summarize(rows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
  """Mean and std over seeds per (algorithm, target), in the rows' order."""
  groups: Dict[Tuple[str, float], List[Mapping[str, Any]]] = collections.OrderedDict()
  for row in rows:
    groups.setdefault((row['method'], float(row['target_epsilon'])), []).append(row)
  out = []
  for (method, target), group in groups.items():
    acc = [float(r['accuracy']) for r in group]
    out.append(dict(method=method, target_epsilon=target,
                    epsilon=float(np.mean([float(r['epsilon']) for r in group])),
                    noise_multiplier=float(np.mean([float(r['noise_multiplier']) for r in group])),
                    clip=float(np.mean([float(r['clip']) for r in group])),
                    accuracy=float(np.mean(acc)), accuracy_std=seed_std(acc),
                    seeds=len(group)))
  return out


def markdown(summary: Sequence[Mapping[str, Any]]) -> str:
  """One row per method, one column per target: test accuracy (%) mean ± std over seeds."""
  targets = sorted({s['target_epsilon'] for s in summary})
  methods = list(dict.fromkeys(s['method'] for s in summary))
  cell = {(s['method'], s['target_epsilon']): s for s in summary}
  rows = []
  for method in methods:
    values = []
    for t in targets:
      s = cell.get((method, t))
      if s is None:
        values.append('')
      elif s['seeds'] > 1:
        values.append(f'{s["accuracy"]:.2f} ± {s["accuracy_std"]:.2f}')
      else:
        values.append(f'{s["accuracy"]:.2f}')
    rows.append([method] + values)
  return tables.markdown_table(
      ['Method'] + [f'ε = {label(t).replace("inf", "∞")}' for t in targets], rows)


def plot(summary: Sequence[Mapping[str, Any]], path: str, title: str = '') -> None:
  """Accuracy against epsilon (`analysis.figures.plot_accuracy_by_epsilon`); written atomically."""
  from tff_meta.analysis import figures  # pylint: disable=g-import-not-at-top
  figures.plot_accuracy_by_epsilon(summary, path, title)
