"""Errors that are the user's to fix; programs print them plainly (no traceback).

Every program ends through `run(main)` (`tff_meta.core.cli`): these
errors, file-system errors and bad flags become one `error: ...` line and a
non-zero exit; anything else is reported as an internal error.
"""

from typing import NoReturn

from tff_meta.data.types import DataError
from tff_meta.core import cli
from tff_meta.core.checkpoints import CheckpointError, IncompatibleCheckpointError
from tff_meta.classification.client_states import ClientStateError
from tff_meta.core.config_file import ConfigError
from tff_meta.classification.training_loop import TrainingDivergedError
from tff_meta.core.registry import UnknownNameError
from tff_meta.core.run_folder import RunFolderError
from tff_meta.runtime.pool import WORKER_LOST_EXIT_CODE, WorkerLostError, WorkerUnavailableError
from tff_meta.runtime.workers import WorkerStartError

USER_ERRORS = (ConfigError, DataError, UnknownNameError, CheckpointError,
               IncompatibleCheckpointError, ClientStateError, TrainingDivergedError,
               WorkerUnavailableError, WorkerStartError, RunFolderError)


def exit_code(error: BaseException) -> int:
  """WORKER_LOST_EXIT_CODE (3) for a worker lost during a run, wherever it was
  noticed (the watchdog exits with 3 too), else 1."""
  return WORKER_LOST_EXIT_CODE if isinstance(error, WorkerLostError) else 1


def fail(error: BaseException) -> NoReturn:
  """Prints `error: ...` (one line) and exits with `exit_code(error)`."""
  cli.fail(error, exit_code(error))


def run(main, extra_errors=()) -> None:
  """`absl.app.run(main)` for a program: USER_ERRORS (and `extra_errors`) end as one
  `error:` line, never a traceback (see `tff_meta.core.cli`)."""
  cli.run(main, USER_ERRORS + tuple(extra_errors), exit_code)


