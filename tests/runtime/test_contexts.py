"""Remote executors free a worker's values as soon as Python drops them."""

import asyncio
import gc

import numpy as np
import tensorflow_federated as tff

from tff_meta.runtime import contexts


def test_a_dropped_remote_value_is_disposed_on_the_worker_at_once(tff_worker):
  # TFF's default batches 20 disposals: the worker would keep this value (and, in a
  # resident run, the server states of the last ~4 rounds) until 19 more are dropped.
  stub = tff.framework.RemoteExecutorGrpcStub(tff_worker.channel)
  sent = []
  dispose = stub.dispose
  stub.dispose = lambda request: (sent.append(len(request.value_ref)), dispose(request))[1]
  executor = contexts.remote_executor(stub)
  executor.set_cardinalities({tff.CLIENTS: 0})
  try:
    value = asyncio.run(executor.create_value(np.arange(3, dtype=np.float32),
                                              tff.TensorType(np.float32, [3])))
    assert list(asyncio.run(value.compute())) == [0.0, 1.0, 2.0]
    assert sent == []
    del value
    gc.collect()
    assert sent == [1]
  finally:
    executor.close()
