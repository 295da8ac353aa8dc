"""Algorithms as TFF processes, registered by name in `ALGORITHMS`."""

from tff_meta.algorithms import fedavg, fedmeta  # noqa: F401  (registers builders)
from tff_meta.algorithms import fedprox, per_fedavg, pfedme  # noqa: F401  (registers builders)
from tff_meta.algorithms import fedec, personal_layers  # noqa: F401  (registers builders)
from tff_meta.algorithms import apfl, ditto, local_only, scaffold  # noqa: F401  (registers builders)
from tff_meta.algorithms.base import ALGORITHMS, OPTIMIZERS, Algorithm, Hparams, build_optimizer

__all__ = ['ALGORITHMS', 'OPTIMIZERS', 'Algorithm', 'Hparams', 'build_optimizer']
