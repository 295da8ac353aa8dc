"""How evenly a method serves clients: the distribution of per-client accuracy.

FedMeta (Sec. 4.2, Fig. 2 bottom row) compares methods by the kernel density
of the final per-client test accuracy, pooled over runs. `summarize` gives the
numbers behind such a plot (mean, spread, percentiles and the mean of the
worst clients) and `kde` the curve.

Everything here works in the units it is given (fractions or percent). Values
that are not finite (a client with no query points) are dropped; nothing is
left -> ValueError. The standard deviation is the population one (ddof=0), as
in `personalized.EvalSummary.client_std`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

PERCENTILES = (10, 25, 50, 75, 90)
WORST_FRACTION = 0.1


def clean(values: Sequence[float]) -> np.ndarray:
  """`values` as a 1-D float64 array without non-finite entries; ValueError if none is left."""
  arr = np.asarray(values, dtype=np.float64).reshape(-1)
  arr = arr[np.isfinite(arr)]
  if arr.size == 0:
    raise ValueError('no finite per-client accuracy to summarize')
  return arr


def worst_count(num_clients: int, fraction: float = WORST_FRACTION) -> int:
  """How many clients make up the worst `fraction`: ceil(fraction * n), at least 1."""
  if not 0 < fraction <= 1:
    raise ValueError(f'fraction must be in (0, 1], got {fraction}')
  # round() first, so that 0.1 * 30 = 3.0000000000000004 counts 3 clients, not 4.
  return max(1, math.ceil(round(fraction * num_clients, 9)))


def worst_mean(values: Sequence[float], fraction: float = WORST_FRACTION) -> float:
  """The mean of the lowest `worst_count(n, fraction)` values."""
  arr = np.sort(clean(values))
  return float(np.mean(arr[:worst_count(arr.size, fraction)]))


@dataclasses.dataclass(frozen=True)
class FairnessSummary:
  num_clients: int
  mean: float
  std: float
  percentiles: Dict[int, float]   # q -> value (linear interpolation, numpy's default)
  worst_fraction: float
  worst_count: int
  worst_mean: float
  min: float
  max: float

  def as_dict(self) -> Dict[str, float]:
    out = dict(num_clients=self.num_clients, mean=self.mean, std=self.std)
    out.update({f'p{q}': v for q, v in self.percentiles.items()})
    out.update(worst_fraction=self.worst_fraction, worst_count=self.worst_count,
               worst_mean=self.worst_mean, min=self.min, max=self.max)
    return out


def summarize(values: Sequence[float], percentiles: Sequence[int] = PERCENTILES,
              worst_fraction: float = WORST_FRACTION) -> FairnessSummary:
  arr = clean(values)
  qs = tuple(int(q) for q in percentiles)
  pct = np.percentile(arr, qs) if qs else np.zeros(0)
  k = worst_count(arr.size, worst_fraction)
  return FairnessSummary(
      num_clients=int(arr.size), mean=float(np.mean(arr)), std=float(np.std(arr)),
      percentiles={q: float(v) for q, v in zip(qs, pct)}, worst_fraction=float(worst_fraction),
      worst_count=k, worst_mean=float(np.mean(np.sort(arr)[:k])),
      min=float(arr.min()), max=float(arr.max()))


@dataclasses.dataclass(frozen=True)
class Density:
  grid: np.ndarray
  density: np.ndarray
  bandwidth: float     # the Gaussian kernel's standard deviation, in the units of the values
  degenerate: bool     # True when the values had no spread (one client, or all equal)


def bandwidth(values: Sequence[float], min_bandwidth: float = 0.01) -> float:
  """Scott's rule (scipy's default: n^(-1/5) times the sample std), at least `min_bandwidth`."""
  arr = clean(values)
  std = float(np.std(arr, ddof=1)) if arr.size > 1 else 0.0
  return max(arr.size ** -0.2 * std, float(min_bandwidth))


def default_grid(values: Sequence[float], bw: float, num_points: int = 512,
                 cut: float = 4.0) -> np.ndarray:
  """Points from min - cut * bw to max + cut * bw: the curve's mass outside is < 1e-4."""
  arr = clean(values)
  return np.linspace(arr.min() - cut * bw, arr.max() + cut * bw, num_points)


def kde(values: Sequence[float], grid: Optional[Sequence[float]] = None,
        min_bandwidth: float = 0.01, num_points: int = 512,
        bounds: Optional[Tuple[float, float]] = None) -> Density:
  """A Gaussian kernel density estimate of `values`, evaluated on `grid`.

  Uses scipy.stats.gaussian_kde with Scott's bandwidth. `min_bandwidth` (in the
  units of the values; 0.01 = one point of accuracy for fractions) is a floor
  on the bandwidth, and the bandwidth used where the values have no spread (a
  single client, or every client equal), where scipy's estimate is singular:
  the density is then a Gaussian bump of that width at each value.

  `bounds=(lo, hi)` (e.g. (0, 1) for accuracies) reflects the kernels at the
  bounds, so that no mass spills past them: the density is zero outside and
  integrates to 1 over [lo, hi]. The default grid then spans [lo, hi].
  Without bounds it spans the values +- 4 bandwidths and integrates to ~1.
  """
  if min_bandwidth <= 0:
    raise ValueError(f'min_bandwidth must be > 0, got {min_bandwidth}')
  from scipy import stats  # pylint: disable=g-import-not-at-top
  arr = clean(values)
  if bounds is not None:
    lo, hi = float(bounds[0]), float(bounds[1])
    if not lo < hi or arr.min() < lo or arr.max() > hi:
      raise ValueError(f'bounds {bounds} must be increasing and hold every value '
                       f'(min {arr.min()}, max {arr.max()})')
  bw = bandwidth(arr, min_bandwidth)
  if grid is not None:
    points = np.asarray(grid, np.float64)
  elif bounds is not None:
    points = np.linspace(lo, hi, num_points)
  else:
    points = default_grid(arr, bw, num_points)
  std = float(np.std(arr, ddof=1)) if arr.size > 1 else 0.0
  degenerate = std <= 1e-12 * max(1.0, float(np.max(np.abs(arr))))
  if degenerate:
    def estimate(x):
      z = (x[:, None] - arr[None, :]) / bw
      return np.mean(np.exp(-0.5 * z * z), axis=1) / (bw * math.sqrt(2 * math.pi))
  else:
    # bw_method is a factor on the sample std; this gives the kernel std `bw` exactly.
    estimate = stats.gaussian_kde(arr, bw_method=bw / std)
  if bounds is None:
    density = estimate(points)
  else:   # the mirror images at lo and hi give back the mass that crossed them
    density = estimate(points) + estimate(2 * lo - points) + estimate(2 * hi - points)
    density = np.where((points >= lo) & (points <= hi), density, 0.0)
  return Density(grid=points, density=np.asarray(density, np.float64), bandwidth=bw,
                 degenerate=bool(degenerate))
