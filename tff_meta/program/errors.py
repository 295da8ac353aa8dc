"""Errors that are the user's to fix; programs print them plainly (no traceback)."""

import sys
from typing import NoReturn

from tff_meta.data.types import DataError
from tff_meta.program.config import ConfigError
from tff_meta.program.training_loop import IncompatibleCheckpointError, TrainingDivergedError
from tff_meta.registry import UnknownNameError
from tff_meta.runtime.pool import WORKER_LOST_EXIT_CODE, WorkerLostError, WorkerUnavailableError

USER_ERRORS = (ConfigError, DataError, UnknownNameError, IncompatibleCheckpointError,
               TrainingDivergedError, WorkerUnavailableError)


def fail(error: BaseException) -> NoReturn:
  """Prints `error: ...` and exits: WORKER_LOST_EXIT_CODE (3) for a worker lost
  during a run, wherever it was noticed (the watchdog exits with 3 too), else 1."""
  print(f'error: {error}', file=sys.stderr, flush=True)
  sys.exit(WORKER_LOST_EXIT_CODE if isinstance(error, WorkerLostError) else 1)
