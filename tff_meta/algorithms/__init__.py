"""Algorithms as TFF processes, registered by name in `ALGORITHMS`.

Each module below defines its algorithms whole (client work, hparams
dataclass, FLOPs, registry entry; see `base.AlgorithmEntry`); importing it
registers them. A new algorithm is a new module plus its name here.
"""

from tff_meta.algorithms import fedavg, fedmeta  # noqa: F401  (registers algorithms)
from tff_meta.algorithms import fedprox, per_fedavg, pfedme  # noqa: F401  (registers algorithms)
from tff_meta.algorithms import fedec, personal_layers  # noqa: F401  (registers algorithms)
from tff_meta.algorithms import apfl, ditto, local_only, scaffold  # noqa: F401  (registers algorithms)
from tff_meta.algorithms.base import (ALGORITHMS, OPTIMIZERS, Algorithm, AlgorithmEntry,
                                      build_optimizer, readers, registered_hparams)

# A config's [hparams] table: every registered algorithm's fields (`hparams.table`).
Hparams = registered_hparams()

__all__ = ['ALGORITHMS', 'OPTIMIZERS', 'Algorithm', 'AlgorithmEntry', 'Hparams', 'build_optimizer',
           'readers']
