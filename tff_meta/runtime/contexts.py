"""Execution contexts over workers that this project owns.

`pool.local_context()` builds on these for library/Colab use.
"""

from __future__ import annotations

from typing import Optional

import tensorflow_federated as tff

from tff_meta.runtime.workers import WorkerProcess


# TFF's RemoteExecutor batches the disposal of remote values by 20 (its
# default): a worker then keeps every value of the last ~4 resident rounds (the
# server state of each, 160 MB for Meta-SGD on the FEMNIST CNN) or of the last
# evaluation calls. Disposing each value at once frees it on the worker when
# Python drops it (docs/DECISIONS.md, "Worker memory").
DISPOSE_BATCH_SIZE = 1


def remote_executor(stub) -> tff.framework.RemoteExecutor:
  """TFF's `RemoteExecutor` on `stub` that disposes every remote value as soon as it is dropped."""
  return tff.framework.RemoteExecutor(stub, dispose_batch_size=DISPOSE_BATCH_SIZE)


def _context_kwargs(stub):
  def stack_fn(cardinalities):
    cardinalities.setdefault(tff.CLIENTS, 0)
    executor = remote_executor(stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return dict(
      executor_fn=tff.framework.ResourceManagingExecutorFactory(stack_fn),
      compiler_fn=tff.backends.native.compiler.desugar_and_transform_to_native,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result)


def async_context_for_stub(stub):
  return tff.framework.AsyncExecutionContext(**_context_kwargs(stub))


def sync_context_for_stub(stub):
  return tff.framework.SyncExecutionContext(**_context_kwargs(stub))


def sync_context_for(worker: WorkerProcess):
  return sync_context_for_stub(worker.stub)


_DEFAULT_WORKER: Optional[WorkerProcess] = None


def set_local_context() -> WorkerProcess:
  """For notebooks: makes a project-owned local worker the default context.

  The worker is stopped at interpreter exit (or call `.stop()` on the result).
  """
  global _DEFAULT_WORKER
  if _DEFAULT_WORKER is None or _DEFAULT_WORKER.process.poll() is not None:
    _DEFAULT_WORKER = WorkerProcess()
  tff.framework.set_default_context(sync_context_for(_DEFAULT_WORKER))
  return _DEFAULT_WORKER
