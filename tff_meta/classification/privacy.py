"""A run's privacy keys: checks, the model aggregator, and its epsilon budget.

The keys are top-level `ExperimentConfig` fields, so each has a generated
flag (`--dp_noise_multiplier`, ...):

- `dp_clip`: '' (default) = no DP; a positive L2 norm C; or 'adaptive' (the
  clip follows the `dp_clip_quantile` quantile of the update norms).
- `dp_noise_multiplier`: z, the noise std on the sum is z C (0 = clipping only,
  epsilon = inf). Needs `dp_clip`.
- `dp_delta`: delta of the reported epsilon; 0 = 1/N^1.1, N training clients.
- `secure_aggregation`: sum the updates with TFF's secure sum (simulated on
  our executor; `algorithms.aggregation`).

DP uses an unweighted mean over the m clients of a round, so it needs
`weighting = "uniform"`: an empty weighting becomes uniform (with a note), an
explicit "num_examples" is an error. Errors name the key and the fix. See
docs/PRIVACY.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from tff_meta.algorithms import aggregation
from tff_meta.classification import accounting

ADAPTIVE = 'adaptive'
# gaussian_adaptive's clipped-count noise is 0.05 m; the effective multiplier
# needs z < 2 * 0.05 m (tff.aggregators.DifferentiallyPrivateFactory).
ADAPTIVE_CLIENTS_PER_NOISE = 10.0


class PrivacyConfigError(ValueError):
  """A bad privacy key; `config.ExperimentConfig.validate` raises it as a ConfigError
  (this module cannot import config, which imports it)."""


@dataclasses.dataclass(frozen=True)
class Budget:
  """What the accountant needs: z, N, m and delta (`accounting.epsilon`)."""
  noise_multiplier: float
  population: int
  clients_per_round: int
  delta: float

  def epsilon(self, rounds: int) -> float:
    return accounting.epsilon(self.noise_multiplier, population=self.population,
                              clients_per_round=self.clients_per_round, rounds=rounds,
                              delta=self.delta)


def dp_enabled(cfg) -> bool:
  return bool(cfg.dp_clip.strip())


def enabled(cfg) -> bool:
  return dp_enabled(cfg) or cfg.secure_aggregation


def clip_norm(cfg) -> Optional[float]:
  """The fixed clip norm, or None for adaptive clipping."""
  value = cfg.dp_clip.strip().lower()
  if value == ADAPTIVE:
    return None
  try:
    norm = float(value)
  except ValueError:
    norm = float('nan')
  if not (norm > 0 and math.isfinite(norm)):
    raise PrivacyConfigError(f'dp_clip must be a positive L2 norm (e.g. 1.0) or "{ADAPTIVE}" '
                             f'(empty = no differential privacy), got {cfg.dp_clip!r}.')
  return norm


def _check_adaptive(noise_multiplier: float, clients_per_round: int) -> None:
  if noise_multiplier > 0 and clients_per_round <= ADAPTIVE_CLIENTS_PER_NOISE * noise_multiplier:
    raise PrivacyConfigError(
        f'dp_clip = "{ADAPTIVE}" with dp_noise_multiplier = {noise_multiplier} needs more than '
        f'{ADAPTIVE_CLIENTS_PER_NOISE * noise_multiplier:g} clients per round (TFF\'s adaptive '
        f'clip spends noise 0.05 per client on the clipped count), got {clients_per_round}; '
        'raise clients_per_round or use a fixed dp_clip norm.')


def validate(cfg) -> None:
  """`PrivacyConfigError`s naming the key and the fix (`ExperimentConfig.validate`), for the
  checks across keys; each key's own range is declared with its field (`config.py`)."""
  z = cfg.dp_noise_multiplier
  if not dp_enabled(cfg):
    if z > 0:
      raise PrivacyConfigError(f'dp_noise_multiplier = {z} needs dp_clip (the noise is scaled to '
                               f'the clip norm): set dp_clip to a norm (e.g. 1.0) or "{ADAPTIVE}".')
    return
  if clip_norm(cfg) is None:
    _check_adaptive(z, cfg.clients_per_round)
  weightings = {cfg.hparams.weighting}
  weightings |= {v.get('weighting', '') for v in cfg.method_hparams.values()}
  if 'num_examples' in weightings:
    raise PrivacyConfigError(
        'Differential privacy needs the uniform (unweighted) mean of the clients\' updates: an '
        'example-weighted mean lets one client\'s data set its weight. Set weighting = "uniform" '
        '(or leave it empty) in [hparams] and [method_hparams.*].')


def model_aggregator(cfg, clients_per_round: int):
  """The `tff.aggregators` factory for the run's update (None = the plain mean)."""
  if dp_enabled(cfg):
    clip = clip_norm(cfg)
    if clip is None:
      _check_adaptive(cfg.dp_noise_multiplier, clients_per_round)
    return aggregation.dp_factory(
        noise_multiplier=cfg.dp_noise_multiplier, clients_per_round=clients_per_round, clip=clip,
        target_quantile=cfg.dp_clip_quantile, secure=cfg.secure_aggregation)
  if cfg.secure_aggregation:
    return aggregation.secure_mean_factory(weighted=True)
  return None


def budget(cfg, population: int) -> Optional[Budget]:
  """The accountant's inputs for a DP run on `population` training clients, else None."""
  if not dp_enabled(cfg):
    return None
  if cfg.clients_per_round > population:
    raise ValueError(f'clients_per_round = {cfg.clients_per_round} of {population} training '
                     'clients: a run cannot sample more clients than there are.')
  return Budget(noise_multiplier=cfg.dp_noise_multiplier, population=population,
                clients_per_round=cfg.clients_per_round,
                delta=cfg.dp_delta or accounting.default_delta(population))
