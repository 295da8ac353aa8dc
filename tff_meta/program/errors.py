"""Errors that are the user's to fix; programs print them plainly (no traceback)."""

from tff_meta.data.types import DataError
from tff_meta.program.config import ConfigError
from tff_meta.program.training_loop import IncompatibleCheckpointError, TrainingDivergedError
from tff_meta.registry import UnknownNameError
from tff_meta.runtime.pool import WorkerUnavailableError

USER_ERRORS = (ConfigError, DataError, UnknownNameError, IncompatibleCheckpointError,
               TrainingDivergedError, WorkerUnavailableError)
