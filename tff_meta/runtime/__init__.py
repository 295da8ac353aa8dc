"""Execution contexts over TFF's C++ worker binary, with worker lifecycle."""

from tff_meta.runtime.contexts import set_local_context
from tff_meta.runtime.pool import local_context
from tff_meta.runtime.workers import WorkerProcess, stop_all_workers

__all__ = ['local_context', 'set_local_context', 'WorkerProcess', 'stop_all_workers']
