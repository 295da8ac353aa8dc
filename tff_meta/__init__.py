"""tff_meta: federated meta-learning and personalized FL on TensorFlow Federated."""

import atexit as _atexit
import sys as _sys

__version__ = '0.1.0'


def _quiet_tff_shutdown() -> None:
  if 'tensorflow_federated' in _sys.modules:
    from tff_meta.runtime import shutdown  # pylint: disable=g-import-not-at-top
    shutdown.drop_tff_default_context()


_atexit.register(_quiet_tff_shutdown)
