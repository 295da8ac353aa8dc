"""The server state stays on worker 0 of a pool; the clients are split over all workers.

TFF's mergeable execution context (what `WorkerPool.context` uses for
several workers) runs a round as `up_to_merge` on every worker, `merge`, and
`after_merge`. Each of those calls serializes its whole argument in Python
and materializes its whole result: the server state goes to every worker and
again to `after_merge`, and every partial sum comes back through Python. For
the FEMNIST CNN that is several hundred MB of Python (de)serialization per
round, more than the compute a second worker saves (docs/RESULTS.md).

`PoolResidentRounds` runs the *same* computations as `process.next` (the
process's declared `get_model_weights`, `client_update`, `server_update` and
`round_metrics`) through TFF's executor API:

1. worker 0 holds the state as a remote value; `params_of(state)` gives the
   broadcast value there;
2. the params are relayed to the other workers as the serialized `Value`
   proto that worker 0 returns, sent on unparsed (no numpy conversion);
3. every worker runs `partial(params, its clients)`, the broadcast, client
   work and `federated_sum` over its share of the round's clients. TFF's
   executor stub blocks while a worker evaluates a call, so each worker is
   driven from its own thread and the workers compute at the same time;
4. the other workers' partial sums are relayed to worker 0 the same way and
   added there (`merge`), and `finish(state, total)` applies the server
   update; only the metrics are fetched.

The state is fetched on the rounds the caller needs it (`needs_state`). The
results equal `process.next`'s up to the order of the float additions in the
sum. Algorithms with client state are not supported here (one worker:
`resident.ResidentRounds`).

Type signatures (S = state, P = params, D = one client's data, T = one
client's contribution, M = metrics):
    params_of: (S@SERVER -> P@SERVER)
    partial:   (<P@SERVER, {D}@CLIENTS> -> T@SERVER)
    merge:     (<T@SERVER, T@SERVER> -> T@SERVER)
    finish:    (<S@SERVER, T@SERVER> -> <S@SERVER, M@SERVER>)
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
from typing import List, Optional, Sequence

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2
# RemoteValue is not exported under tff.framework in TFF 0.87.
from tensorflow_federated.python.core.impl.executors import remote_executor

from tff_meta.runtime import contexts, fast_values
from tff_meta.runtime.resident import LoopThread
from tff_meta.runtime.rounds import NeedsState, RoundResult, RoundRunner, check_no_client_states
from tff_meta.runtime.tls import TlsFiles, open_channel
from tff_meta.runtime.workers import close_channel


def split_counts(num_clients: int, num_workers: int) -> List[int]:
  """Clients per worker: as equal as possible, the first workers take the remainder."""
  if num_clients < num_workers:
    raise ValueError(f'{num_clients} clients per round cannot be split over {num_workers} '
                     'workers; use fewer workers or more clients per round.')
  base, extra = divmod(num_clients, num_workers)
  return [base + (1 if i < extra else 0) for i in range(num_workers)]


def build_pieces(process):
  """The four federated computations of the module docstring, from `process`'s parts."""
  if process.stateful or process.server_update is None:
    raise ValueError('resident_state on a worker pool needs an algorithm without client '
                     'state or model_aggregator (its round cannot be split into these '
                     'computations); use one worker.')
  state_type = process.get_model_weights.type_signature.parameter
  params_type = process.params_type
  total_type = process.client_output_type
  at_server = lambda t: tff.FederatedType(t, tff.SERVER)

  @tff.federated_computation(at_server(state_type))
  def params_of(state):
    return tff.federated_map(process.get_model_weights, state)

  @tff.federated_computation(at_server(params_type),
                             tff.FederatedType(process.data_type, tff.CLIENTS))
  def partial(params, data):
    outputs = tff.federated_map(process.client_update, (tff.federated_broadcast(params), data))
    return tff.federated_sum(outputs)

  @tff.tensorflow.computation(total_type, total_type)
  def add(a, b):
    return tf.nest.map_structure(tf.add, a, b)

  @tff.federated_computation(at_server(total_type), at_server(total_type))
  def merge(a, b):
    return tff.federated_map(add, (a, b))

  @tff.federated_computation(at_server(state_type), at_server(total_type))
  def finish(state, total):
    return (tff.federated_map(process.server_update, (state, total)),
            tff.federated_map(process.round_metrics, total))

  return params_of, partial, merge, finish


class _Worker:
  """One worker's remote executor, with a raw-proto relay to another worker."""

  def __init__(self, address: str, num_clients: int, tls: Optional[TlsFiles]):
    self.channel = open_channel(address, tls)
    self.stub = tff.framework.RemoteExecutorGrpcStub(self.channel)
    self.executor = contexts.remote_executor(self.stub)
    self.executor.set_cardinalities({tff.CLIENTS: num_clients})
    self.num_clients = num_clients

  def raw(self, value) -> executor_pb2.Value:
    """The computed value as the worker serialized it (not parsed into numpy)."""
    request = executor_pb2.ComputeRequest(
        executor=self.executor._executor_id, value_ref=value.reference)  # pylint: disable=protected-access
    return self.stub.compute(request).value

  def adopt(self, proto: executor_pb2.Value, type_spec):
    """A remote value on this worker from another worker's serialized value."""
    request = executor_pb2.CreateValueRequest(
        executor=self.executor._executor_id, value=proto)  # pylint: disable=protected-access
    ref = self.stub.create_value(request).value_ref
    return remote_executor.RemoteValue(ref, type_spec, self.executor)

  async def call(self, comp, *args):
    """Calls the remote computation `comp` on remote values `args` (in parameter order)."""
    if len(args) == 1:
      return await self.executor.create_call(comp, args[0])
    names = [name for name, _ in tff.structure.iter_elements(comp.type_signature.parameter)]
    arg = await self.executor.create_struct(collections.OrderedDict(zip(names, args)))
    return await self.executor.create_call(comp, arg)

  def close(self):
    self.executor.close()
    close_channel(self.channel)


class PoolResidentRounds(RoundRunner):
  """Rounds with the state on worker 0 and the round's clients split over a pool.

  `next(state, round_num, batch)` runs the round (`batch` must hold
  `num_clients` clients every round; `tls`: the trainer's files for a TLS
  pool); it returns the state (fetched when
  `needs_state(round_num)`, else the given, stale one) and the metrics.
  """

  def __init__(self, process, addresses: Sequence[str], num_clients: int,
               needs_state: NeedsState, tls: Optional[TlsFiles] = None):
    self._counts = split_counts(num_clients, len(addresses))
    pieces = build_pieces(process)
    self._types = process.next.type_signature
    self._needs_state = needs_state
    self._num_clients = num_clients
    self._loop = LoopThread()
    self._threads = concurrent.futures.ThreadPoolExecutor(len(addresses))
    self._workers = [_Worker(a, n, tls) for a, n in zip(addresses, self._counts)]
    compile_ = tff.backends.native.compiler.desugar_and_transform_to_native
    self._fns = []
    for w in self._workers:
      self._fns.append([self._loop.run(w.executor.create_value(compile_(c), c.type_signature))
                        for c in pieces])
    self._param_type = pieces[0].type_signature.result
    self._total_type = pieces[1].type_signature.result
    self._remote_state = None
    self._returned = None

  async def _round(self, state, batch):
    if len(batch) != self._num_clients:
      raise ValueError(f'PoolResidentRounds was built for {self._num_clients} clients per '
                       f'round, got {len(batch)}.')
    lead = self._workers[0]
    params_of, partial, merge, finish = self._fns[0]
    if state is not self._returned or self._remote_state is None:
      self._remote_state = await lead.executor.create_value(state, self._types.parameter[0])
    params = await lead.call(params_of, self._remote_state)
    params_proto = lead.raw(params) if len(self._workers) > 1 else None
    data_type = self._types.parameter[1]
    offsets = [sum(self._counts[:i]) for i in range(len(self._workers))]

    def run_partial(i):
      """Worker i's share of the round. TFF's stub blocks until the worker has
      evaluated the call, so each worker is driven from its own thread (the
      blocking gRPC calls release the GIL) and the workers compute at once."""
      worker, count = self._workers[i], self._counts[i]

      async def share_and_call():
        share = await fast_values.create_value(
            worker.executor, list(batch[offsets[i]:offsets[i] + count]), data_type)
        worker_params = params if i == 0 else worker.adopt(params_proto, self._param_type)
        part = await worker.call(self._fns[i][1], worker_params, share)
        return part, (worker.raw(part) if i > 0 else None)
      return asyncio.run(share_and_call())

    results = list(self._threads.map(run_partial, range(len(self._workers))))
    total = results[0][0]
    for _, proto in results[1:]:
      total = await lead.call(merge, total, lead.adopt(proto, self._total_type))
    out = await lead.call(finish, self._remote_state, total)
    self._remote_state = await lead.executor.create_selection(out, 0)
    metrics = await (await lead.executor.create_selection(out, 1)).compute()
    return tff.types.type_to_py_container(metrics, self._types.result[1])

  async def _fetch(self):
    value = await self._remote_state.compute()
    return tff.types.type_to_py_container(value, self._types.result[0])

  def next(self, state, round_num: int, batch: Sequence,
           client_states: Optional[Sequence] = None) -> RoundResult:
    check_no_client_states(self, client_states)
    metrics = self._loop.run(self._round(state, list(batch)))
    if self._needs_state(round_num):
      state = self._returned = self._loop.run(self._fetch())
    else:
      self._returned = state
    return RoundResult(state, metrics)

  def close(self) -> None:
    self._remote_state = None
    self._fns = []
    for w in self._workers:
      w.close()
    self._loop.close()
    self._threads.shutdown()
