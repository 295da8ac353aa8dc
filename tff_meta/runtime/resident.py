"""The server state stays on the TFF worker between rounds.

TFF's execution contexts serialize every argument of every call and
materialize every result: each round the server state (theta plus optimizer
slots, ~79 MB for the FEMNIST CNN with Adam) is serialized in Python, sent to
the C++ worker, and sent back. Most of a FEMNIST round's overhead is there
(docs/RESULTS.md).

`ResidentRounds` calls the *same* compiled `process.next` through TFF's own
executor API (`tff.framework.RemoteExecutor`, the layer the execution contexts
are built on): the state becomes a remote value on the worker, each round
is `create_call(next, <state_ref, data>)`, and only the round's metrics are
computed (fetched). The state is fetched only on rounds where the caller
needs it (evaluation, checkpoints, the last round). Old remote values are
disposed on the worker as soon as Python drops them
(`contexts.remote_executor`). One worker only (the mergeable form of worker
pools materializes every call's result).

With a `resident_data.DataPool` (a grouped process's rounds), the client
data stay on the worker too: the round's call is `resident_data.pooled_next`,
which builds `next`'s data argument on the worker from the arrays already
sent (the pool) and the round's row positions, in the same call, and the
runner takes each group's clients unpacked (`takes_client_groups`).

Algorithms with per-client state (`algorithms/stateful.py`) pass the round's
client states in and get them back every round, as they must: they live in
the program's `ClientStateStore`. Only the server state stays resident.

Type signatures of the calls (S = state, D = one client's data, M = metrics,
C = one client's state):
    next: (<state=S@SERVER, client_data={D}@CLIENTS> -> <S@SERVER, M@SERVER>)
    next: (<S@SERVER, {C}@CLIENTS, {D}@CLIENTS> -> <S@SERVER, {C}@CLIENTS, M@SERVER>)
    with a pool, the data {D}@CLIENTS given as <P@CLIENTS, {I}@CLIENTS> (`resident_data`)
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Optional, Sequence

import tensorflow_federated as tff

from tff_meta.runtime import contexts, fast_values, resident_data
from tff_meta.runtime.rounds import NeedsState, RoundResult, RoundRunner
from tff_meta.runtime.tls import TlsFiles, open_channel
from tff_meta.runtime.workers import close_channel


class LoopThread:
  """An event loop on its own thread, so sync callers (also inside asyncio.run) can wait."""

  def __init__(self):
    self.loop = asyncio.new_event_loop()
    self._thread = threading.Thread(target=self.loop.run_forever, name='tff-resident',
                                    daemon=True)
    self._thread.start()

  def run(self, coro):
    return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

  def close(self):
    self.loop.call_soon_threadsafe(self.loop.stop)
    self._thread.join()
    self.loop.close()


class ResidentRounds(RoundRunner):
  """Rounds of `process.next` with the server state on the worker (`rounds.RoundRunner`).

  `next(state, round_num, batch[, client_states])` runs the round; the state
  is uploaded when it is not the one this object last returned; it is
  fetched and returned on rounds with `needs_state(round_num)`, otherwise
  the given `state` is returned unchanged (it is then stale: the current
  state lives on the worker).
  """

  def __init__(self, process, address: str, num_clients: int, needs_state: NeedsState,
               tls: Optional[TlsFiles] = None,
               data_pool: Optional[resident_data.DataPool] = None):
    self._process = process
    self._needs_state = needs_state
    self._channel = open_channel(address, tls)   # tls: the trainer's files for a TLS pool
    self._executor = contexts.remote_executor(tff.framework.RemoteExecutorGrpcStub(self._channel))
    self._executor.set_cardinalities({tff.CLIENTS: num_clients})
    self._loop = LoopThread()
    self._pool = data_pool
    self.takes_client_groups = data_pool is not None
    round_fn = (process.next if data_pool is None
                else resident_data.pooled_next(process.next, data_pool.data_spec))
    compiled = tff.backends.native.compiler.desugar_and_transform_to_native(round_fn)
    self._types = round_fn.type_signature
    self._fn = self._loop.run(self._executor.create_value(compiled, compiled.type_signature))
    self._remote_pool = None
    self._remote_state = None
    self._returned = None   # the Python state this object last returned

  async def _round(self, state, inputs):
    if state is not self._returned or self._remote_state is None:
      self._remote_state = await self._executor.create_value(state, self._types.parameter[0])
    elements = list(tff.structure.iter_elements(self._types.parameter))
    takes = len(elements) - (2 if self._pool is not None else 1)   # the pool: two for the data
    if len(inputs) != takes:
      raise ValueError(f'process.next takes {takes} argument(s) after the state, '
                       f'got {len(inputs)}.')
    values = [self._remote_state]
    # The state and client states, small, through TFF's own serializer; the round's data
    # (the last input) in place, or as the pool and the groups' positions into it.
    for value, (_, value_type) in zip(inputs[:-1], elements[1:]):
      values.append(await self._executor.create_value(self._clients(value, value_type),
                                                      value_type))
    data, data_type = inputs[-1], elements[-1][1]
    if self._pool is None:
      values.append(await fast_values.create_value(
          self._executor, self._clients(data, data_type), data_type))
    else:
      pool, positions = self._pool.plan(list(data))
      pool_type, positions_type = elements[-2][1], elements[-1][1]
      if pool is not None:
        self._remote_pool = await fast_values.create_value(self._executor, pool, pool_type)
      values += [self._remote_pool,
                 await fast_values.create_value(self._executor, positions, positions_type)]
    arg = await self._executor.create_struct(
        collections.OrderedDict(zip([name for name, _ in elements], values)))
    call = await self._executor.create_call(self._fn, arg)
    self._remote_state = await self._executor.create_selection(call, 0)
    outputs = []
    for i in range(1, len(self._types.result)):
      value = await (await self._executor.create_selection(call, i)).compute()
      outputs.append(tff.types.type_to_py_container(value, self._types.result[i]))
    return outputs

  @staticmethod
  def _clients(value, value_type):
    """A CLIENTS-placed value as the list TFF's serializers take."""
    if isinstance(value_type, tff.FederatedType) and value_type.placement is tff.CLIENTS:
      return list(value)
    return value

  async def _fetch(self):
    value = await self._remote_state.compute()
    return tff.types.type_to_py_container(value, self._types.result[0])

  def next(self, state, round_num: int, batch: Sequence,
           client_states: Optional[Sequence] = None) -> RoundResult:
    inputs = (batch,) if client_states is None else (client_states, batch)
    outputs = self._loop.run(self._round(state, inputs))
    if self._needs_state(round_num):
      state = self._returned = self._loop.run(self._fetch())
    else:
      self._returned = state
    if client_states is None:
      return RoundResult(state, *outputs)
    new_client_states, metrics = outputs
    return RoundResult(state, metrics, new_client_states)

  def close(self) -> None:
    self._remote_state = self._fn = self._remote_pool = None
    self._executor.close()
    self._loop.close()
    close_channel(self._channel)
