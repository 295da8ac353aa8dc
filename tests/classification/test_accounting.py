"""Epsilon accounting for the DP mean under our client sampler (issue #18)."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp

from tff_meta.classification import accounting
from tff_meta.data import client_data


def test_poisson_rdp_reproduces_tf_privacys_documented_value():
  """TF Privacy's compute_dp_sgd_privacy test (tensorflow_privacy 0.9.0,
  compute_dp_sgd_privacy_test.py, 'Test0'): N = 60000, batch 150, z = 1.3,
  15 epochs, delta = 1e-5 -> epsilon = 0.7242234026109595 (Poisson, RDP)."""
  steps = math.ceil(15 * 60000 / 150)
  eps = accounting.epsilon(1.3, population=60000, clients_per_round=150, rounds=steps,
                           delta=1e-5, sampling='poisson')
  assert eps == pytest.approx(0.7242234026109595, rel=1e-9)
  # PLD is tighter than RDP for the same mechanism.
  pld_eps = accounting.epsilon(1.3, population=60000, clients_per_round=150, rounds=steps,
                               delta=1e-5, sampling='poisson', accountant='pld')
  assert 0.5 * eps < pld_eps < eps


def test_full_participation_is_the_gaussian_at_half_the_multiplier_by_hand():
  """m = N: T Gaussian rounds; replacing a client moves the clipped sum by 2C,
  so RDP(a) = T a / (2 (z/2)^2) = 2 T a / z^2, converted to (eps, delta) by
  eps = min_a RDP(a) + log(1 - 1/a) - log(delta a) / (a - 1)
  (Canonne, Kamath, Steinke 2020, Prop. 12; dp_accounting's conversion)."""
  z, rounds, delta = 2.0, 50, 1e-5
  orders = np.array([a for a in rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS if a > 1.01])
  by_hand = np.min(2 * rounds * orders / z**2 + np.log1p(-1 / orders)
                   - np.log(delta * orders) / (orders - 1))
  eps = accounting.epsilon(z, population=30, clients_per_round=30, rounds=rounds, delta=delta)
  assert eps == pytest.approx(by_hand, rel=1e-9)
  # Not the add/remove-one value (multiplier z): that would be about half.
  assert eps > 1.8 * accounting.epsilon(z, population=30, clients_per_round=30, rounds=rounds,
                                        delta=delta, sampling='poisson')


@pytest.mark.slow
def test_fixed_size_sampling_is_dp_accountings_sampled_without_replacement():
  """Our sampler draws m of N without replacement each round: the reference
  is dp_accounting's RDP of SampledWithoutReplacementDpEvent (replace-one)."""
  n, m, z, rounds, delta = 1000, 20, 1.0, 200, 1e-6
  idx = client_data.sample_clients(n, m, seed=3, round_num=7)
  assert len(idx) == m and len(set(idx.tolist())) == m   # fixed size, no repeats
  reference = rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE).compose(
          dp_accounting.SampledWithoutReplacementDpEvent(
              n, m, dp_accounting.GaussianDpEvent(z / 2)), rounds).get_epsilon(delta)
  eps = accounting.epsilon(z, population=n, clients_per_round=m, rounds=rounds, delta=delta)
  assert eps == pytest.approx(reference, rel=1e-9)
  full = accounting.epsilon(z, population=n, clients_per_round=n, rounds=rounds, delta=delta)
  assert eps < full / 5   # amplification by subsampling


@pytest.mark.slow
def test_epsilon_grows_with_rounds_and_shrinks_with_noise():
  kw = dict(population=100, clients_per_round=10, delta=1e-5)
  assert accounting.epsilon(1.0, rounds=0, **kw) == 0.0
  assert accounting.epsilon(0.0, rounds=5, **kw) == math.inf
  eps = [accounting.epsilon(1.0, rounds=r, **kw) for r in (1, 10, 100)]
  assert eps[0] < eps[1] < eps[2]
  assert accounting.epsilon(2.0, rounds=100, **kw) < eps[2]
  # m near N never reports more than full participation.
  assert accounting.epsilon(1.0, rounds=10, population=40, clients_per_round=39, delta=1e-5) <= \
      accounting.epsilon(1.0, rounds=10, population=40, clients_per_round=40, delta=1e-5)


def test_default_delta_is_below_one_over_n():
  assert accounting.default_delta(100) == pytest.approx(100**-1.1)
  assert accounting.default_delta(100) < 1 / 100


def test_pld_refuses_sampling_without_replacement():
  with pytest.raises(ValueError, match='rdp'):
    accounting.epsilon(1.0, population=10, clients_per_round=2, rounds=3, delta=1e-5,
                       accountant='pld')


@pytest.mark.slow
def test_noise_multiplier_for_a_target_epsilon():
  kw = dict(population=80, clients_per_round=5, rounds=50, delta=accounting.default_delta(80))
  z = accounting.noise_multiplier_for(4.0, tolerance=0.01, **kw)
  assert accounting.epsilon(z, **kw) <= 4.0 < accounting.epsilon(0.98 * z, **kw)


def test_more_clients_per_round_than_the_population_is_refused():
  with pytest.raises(ValueError, match='clients_per_round <= population'):
    accounting.round_event(1.0, population=10, clients_per_round=11)
