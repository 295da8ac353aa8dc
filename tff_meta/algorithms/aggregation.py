"""The meta-update's aggregation as a `tff.aggregators` factory.

Every process (`process.build_round`) takes `model_aggregator`, as the
`tff.learning` builders do. It aggregates what each client sends to the
server: FedMeta's meta-gradient g_u (FedMeta Alg. 1, l. 17; for Meta-SGD the
(theta, alpha) meta-gradient), the model delta theta - theta_u of FedAvg,
Reptile and FedEC, SCAFFOLD's (delta y, delta c), the shared part's update of
the personal-layer methods.

- `None` (the default): the weighted mean of the accepted clients, with the
  round's weights (uniform or by examples; a rejected, non-finite client has
  weight 0). The round computes it in its single `federated_sum` (so it runs
  on worker pools and with resident server state); it equals
  `tff.aggregators.MeanFactory()` on (update, weight), which the tests check.
- `dp_factory`: `tff.aggregators.DifferentiallyPrivateFactory` with Gaussian
  noise and a fixed L2 clip (`gaussian_fixed`'s query) or an adaptive one
  (`gaussian_adaptive`'s query: the clip tracks a target quantile of the
  update norms, Andrew et al. 2021). Each client's whole update is clipped to
  norm C, the clipped updates are summed, N(0, (z C)^2) noise is added to the
  sum, and it is divided by the fixed clients per round m: user-level DP on
  the meta-update (McMahan et al. 2018, DP-FedAvg). It is an *unweighted*
  mean: a weight that depends on the client's data would change the
  sensitivity, so DP needs `weighting = "uniform"` (`check_weighting`).
  With `secure=True` the clipped records are summed by `secure_sum_factory`.
- `secure_mean_factory`: secure aggregation without DP,
  `tff.learning.secure_aggregator` (its range adapts to the updates).

Secure sums use `tff.federated_secure_sum_bitwidth`, which TFF's C++ worker
does not implement: `simulated` replaces them with plain sums that keep
their range checks (TFF's own test transform). The arithmetic (per-coordinate
clipping to the range, 32-bit quantization, integer sum) is that of the
protocol; the cryptography is not run.

Type signatures (U = the update, the structure of the params):
    DP, secure mean (unweighted):
      next: (<S@SERVER, {U}@CLIENTS>
             -> <state=S@SERVER, result=U@SERVER, measurements=M@SERVER>)
    weighted factories (e.g. `tff.aggregators.MeanFactory()`):
      next: (<S@SERVER, {U}@CLIENTS, {float32}@CLIENTS>
             -> <state=S@SERVER, result=U@SERVER, measurements=M@SERVER>)
"""

from __future__ import annotations

import collections
import functools
import gc
import logging
from typing import Callable, Optional

import tensorflow_federated as tff
import tensorflow_privacy as tfp
# `adaptive_clip_noise_params` (the noise split of `gaussian_adaptive`) is not
# exported under tff.aggregators in TFF 0.87.
from tensorflow_federated.python.aggregators import differential_privacy

# Secure sums quantize each coordinate to this many bits (SecureSumFactory's float mode).
SECURE_BITS = 32
# The secure sum's per-coordinate range with an adaptive DP clip, whose value
# the clients' range cannot follow: coordinates beyond it are clipped, which
# never raises a record's norm (so the DP guarantee holds).
ADAPTIVE_SECURE_BOUND = 10.0
# `gaussian_adaptive`'s defaults (TFF 0.87).
ADAPTIVE_INITIAL_CLIP = 0.1
ADAPTIVE_LEARNING_RATE = 0.2


class NotApplicableError(ValueError):
  """A method that sends nothing a server-side aggregator could protect."""


def is_weighted(factory) -> bool:
  """Whether `factory` takes a weight per client (a `WeightedAggregationFactory`)."""
  return isinstance(factory, tff.aggregators.WeightedAggregationFactory)


def is_private(factory) -> bool:
  """Whether `factory` is a `DifferentiallyPrivateFactory`: then the server
  state may depend on the clients only through its output (no accept rule)."""
  return isinstance(factory, tff.aggregators.DifferentiallyPrivateFactory)


def check_weighting(factory, weighting: str) -> None:
  """An unweighted factory (DP, secure mean) needs the uniform weighting."""
  if factory is not None and not is_weighted(factory) and weighting != 'uniform':
    raise ValueError(
        f'This aggregator is an unweighted mean (differential privacy needs one: a per-client '
        f'weight from its data changes the sensitivity), but weighting={weighting!r}; set '
        'weighting = "uniform".')


def secure_sum_factory(bound: float) -> tff.aggregators.SecureSumFactory:
  """Secure sum of float values clipped to [-bound, bound] per coordinate and
  quantized to `SECURE_BITS` bits (`tff.aggregators.SecureSumFactory`)."""
  return tff.aggregators.SecureSumFactory(float(bound))


def quantization_error_bound(bound: float, num_clients: int) -> float:
  """Largest per-coordinate error of `secure_sum_factory(bound)`'s sum of
  `num_clients` in-range float32 values against their float sum.

  Each client's value is scaled in float64 to 2^32 - 1 steps over
  [-bound, bound] and rounded (with the rounded lower bound subtracted): at
  most one step of error per client. The float32 result and reference sums
  (magnitude <= num_clients * bound) add float32 rounding, 2^-23 relative.
  """
  step = 2.0 * bound / (2.0**SECURE_BITS - 1)
  return num_clients * step + num_clients * bound * 2.0**-23


def dp_factory(*, noise_multiplier: float, clients_per_round: int, clip: Optional[float],
               target_quantile: float = 0.5, secure: bool = False
               ) -> tff.aggregators.DifferentiallyPrivateFactory:
  """The DP mean of the clients' updates (module docstring).

  Args:
    noise_multiplier: z; the noise on the sum has std z * clip (0 = none).
    clients_per_round: m, the fixed denominator of the mean.
    clip: the L2 clip norm C, or None for adaptive clipping (starting at
      `ADAPTIVE_INITIAL_CLIP`, towards the `target_quantile` of the norms; z is
      then the effective total multiplier, as in `gaussian_adaptive`).
    secure: sum the clipped records with `secure_sum_factory` (range C per
      coordinate, or `ADAPTIVE_SECURE_BOUND`).
  """
  m = float(clients_per_round)
  if clip is None:
    value_z, count_std = differential_privacy.adaptive_clip_noise_params(
        float(noise_multiplier), m)
    query = tfp.QuantileAdaptiveClipSumQuery(
        initial_l2_norm_clip=ADAPTIVE_INITIAL_CLIP, noise_multiplier=value_z,
        target_unclipped_quantile=float(target_quantile), learning_rate=ADAPTIVE_LEARNING_RATE,
        clipped_count_stddev=count_std, expected_num_records=m, geometric_update=True)
    bound = ADAPTIVE_SECURE_BOUND
  else:
    query = tfp.GaussianSumQuery(l2_norm_clip=float(clip),
                                 stddev=float(clip) * float(noise_multiplier))
    bound = float(clip)
  return tff.aggregators.DifferentiallyPrivateFactory(
      tfp.NormalizedQuery(query, denominator=m),
      record_aggregation_factory=secure_sum_factory(bound) if secure else None)


def secure_mean_factory(*, weighted: bool) -> tff.aggregators.AggregationFactory:
  """Secure aggregation without DP: `tff.learning.secure_aggregator`, whose
  per-coordinate range is a (noiseless, securely summed) estimate of the
  updates' spread; values beyond it are clipped."""
  return tff.learning.secure_aggregator(zeroing=False, clipping=False, weighted=weighted)


def uses_secure_sum(computation: tff.Computation) -> bool:
  """Whether `computation` calls a secure-sum intrinsic."""
  return 'federated_secure' in computation.to_building_block().compact_representation()


def simulated(computation: tff.Computation) -> tff.Computation:
  """`computation` with its secure-sum intrinsics replaced by plain sums (our
  C++ workers implement none), keeping its Python containers; a no-op for a
  computation without them."""
  replaced = tff.backends.test.replace_secure_intrinsics_with_bodies(computation)
  return tff.framework.ConcreteComputation(
      computation_proto=tff.framework.ConcreteComputation.get_proto(replaced),
      context_stack=tff.framework.get_context_stack(),
      annotated_type=computation.type_signature)


def with_dict_containers(type_spec):
  """`type_spec` with every named struct an OrderedDict (unnamed ones lists).

  An aggregator's state comes in namedtuples (e.g. `DPAggregatorState`),
  which tff.program's checkpoints read back as dicts; kept in the server
  state as OrderedDicts, a checkpoint matches the state's structure.
  """
  if not isinstance(type_spec, tff.StructType):
    return type_spec
  elements = [(name, with_dict_containers(t)) for name, t in tff.structure.iter_elements(type_spec)]
  if not elements:
    return type_spec
  if all(name for name, _ in elements):
    return tff.StructWithPythonType(elements, collections.OrderedDict)
  return tff.StructWithPythonType([t for _, t in elements], list)


def quiet_tracing(build: Callable) -> Callable:
  """Decorates a process builder: with a `model_aggregator`, TF's logger is
  silenced while it traces. TFF's secure sums and DP queries leave unused
  assert ops behind, which TF reports as errors ("Object was never used")
  when their graphs are collected; they are collected before the logger is
  restored."""

  @functools.wraps(build)
  def wrapper(*args, **kwargs):
    if kwargs.get('model_aggregator') is None:
      return build(*args, **kwargs)
    tf_logger = logging.getLogger('tensorflow')
    level = tf_logger.level
    tf_logger.setLevel(logging.CRITICAL)
    try:
      result = build(*args, **kwargs)
      gc.collect()
    finally:
      tf_logger.setLevel(level)
    return result

  return wrapper
