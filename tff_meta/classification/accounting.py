"""Privacy accounting: the (epsilon, delta) of T rounds of the DP mean.

Each round releases the DP mean of `aggregation.dp_factory`: the sum of the
sampled clients' updates, each clipped to L2 norm C, plus N(0, (z C)^2)
noise. The sampler (`client_data.sample_clients`) draws m (clients per
round, at most N) of the N training clients uniformly *without replacement*, afresh
each round: a fixed-size sample, not Poisson. Its accounting
(`dp_accounting.SampledWithoutReplacementDpEvent`, Wang, Balle and
Kasiviswanathan 2019, Thm. 27, RDP) is for the *replace-one* relation: N is
public and a neighbouring population changes one client's data. Replacing
one client moves the clipped sum by up to 2C, so the Gaussian's noise
multiplier relative to that sensitivity is z / 2. With m = N every round is
the plain Gaussian mechanism at z / 2; for m < N each RDP order takes the
smaller of the subsampled bound and that one (both hold: a subsampled round
is never less private than a full one, as the Renyi divergence of mixtures
is at most that of their parts, and Wang et al.'s bound is loose as m
approaches N). The T rounds compose in RDP (T times one round's curve),
converted to (epsilon, delta) by dp-accounting. The epsilon is user-level (a user = a client, all its data).

Poisson sampling (each client independently with probability q, as in
McMahan et al. 2018) has the add/remove-one relation and multiplier z; it is
here for reference (`sampling='poisson'`), with RDP or the tighter PLD
accountant. dp-accounting 0.4.3's PLD accountant has no
sampling-without-replacement event, so our sampler is accounted with RDP.
"""

from __future__ import annotations

import functools
import math

import dp_accounting
import numpy as np
from dp_accounting import pld, rdp

SAMPLINGS = ('without_replacement', 'poisson')
ORDERS = tuple(rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
ACCOUNTANTS = ('rdp', 'pld')


def default_delta(population: int) -> float:
  """delta = 1 / N^1.1: below 1/N, as a meaningful user-level delta must be."""
  return 1.0 / population**1.1


def round_event(noise_multiplier: float, population: int, clients_per_round: int,
                sampling: str = 'without_replacement') -> dp_accounting.DpEvent:
  """The `DpEvent` of one round (module docstring)."""
  if sampling not in SAMPLINGS:
    raise ValueError(f'Unknown sampling {sampling!r}; use one of {SAMPLINGS}.')
  if population < 1 or not 1 <= clients_per_round <= population:
    raise ValueError(f'Need population >= 1 and 1 <= clients_per_round <= population, got '
                     f'{population}, {clients_per_round}.')
  m = clients_per_round
  if sampling == 'poisson':
    return dp_accounting.PoissonSampledDpEvent(
        m / population, dp_accounting.GaussianDpEvent(noise_multiplier))
  gaussian = dp_accounting.GaussianDpEvent(noise_multiplier / 2.0)   # sensitivity 2C
  if m == population:
    return gaussian
  return dp_accounting.SampledWithoutReplacementDpEvent(population, m, gaussian)


@functools.lru_cache(maxsize=64)
def _round_rdp(noise_multiplier: float, population: int, clients_per_round: int,
               sampling: str) -> np.ndarray:
  """One round's RDP at `rdp.DEFAULT_RDP_ORDERS` (computed once: the
  sampled-without-replacement terms take seconds at the high orders)."""
  relation = (dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE if sampling == 'poisson'
              else dp_accounting.NeighboringRelation.REPLACE_ONE)
  acc = rdp.RdpAccountant(ORDERS, neighboring_relation=relation)
  acc.compose(round_event(noise_multiplier, population, clients_per_round, sampling))
  # dp-accounting 0.4.3 has no public getter for the composed RDP curve.
  return np.array(acc._rdp)  # pylint: disable=protected-access


def epsilon(noise_multiplier: float, *, population: int, clients_per_round: int, rounds: int,
            delta: float, sampling: str = 'without_replacement',
            accountant: str = 'rdp') -> float:
  """epsilon at `delta` after `rounds` rounds; inf without noise, 0 after no round."""
  if rounds <= 0:
    return 0.0
  if noise_multiplier <= 0:
    return math.inf
  if accountant not in ACCOUNTANTS:
    raise ValueError(f'Unknown accountant {accountant!r}; use one of {ACCOUNTANTS}.')
  if accountant == 'pld':
    if sampling != 'poisson':
      raise ValueError('dp-accounting 0.4.3\'s PLD accountant has no sampling without '
                       'replacement; use accountant="rdp".')
    event = dp_accounting.SelfComposedDpEvent(
        round_event(noise_multiplier, population, clients_per_round, sampling), rounds)
    acc = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return float(acc.compose(event).get_epsilon(delta))
  curve = _round_rdp(noise_multiplier, population, clients_per_round, sampling)
  if sampling == 'without_replacement':
    curve = np.minimum(curve, _round_rdp(noise_multiplier, population, population, sampling))
  return float(rdp.rdp_privacy_accountant.compute_epsilon(ORDERS, rounds * curve, delta)[0])


def noise_multiplier_for(target_epsilon: float, *, population: int, clients_per_round: int,
                         rounds: int, delta: float, tolerance: float = 0.01) -> float:
  """The smallest z (to `tolerance` relative) whose `epsilon` after `rounds` rounds is at
  most `target_epsilon`: bisection on z, as epsilon falls as z grows (for choosing
  dp_noise_multiplier for an epsilon target, e.g. accuracy-against-epsilon curves)."""
  if not target_epsilon > 0:
    raise ValueError(f'target_epsilon must be > 0, got {target_epsilon}.')
  eps = lambda z: epsilon(z, population=population, clients_per_round=clients_per_round,
                          rounds=rounds, delta=delta)
  low, high = 0.0, 1.0
  while eps(high) > target_epsilon:
    low, high = high, 2.0 * high
  while high - low > tolerance * high:
    mid = 0.5 * (low + high)
    low, high = (mid, high) if eps(mid) > target_epsilon else (low, mid)
  return high
