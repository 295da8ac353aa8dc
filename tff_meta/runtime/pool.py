"""A pool of TFF C++ workers, local or remote, as one execution context.

One worker: a plain sync context over its gRPC stub. Several: TFF's
mergeable-computation context (`create_mergeable_comp_execution_context`),
which splits each round's clients across the workers and merges their
aggregates, so a round must have a single aggregation stage (ours do, see
`algorithms/process.py`). This is TFF's own remote execution: no home-made
RPC (TFF_NOTES, "Several workers").

A dead or unreachable worker is reported by address: `WorkerUnavailableError`
between calls, or the `watch` watchdog during one (TFF itself would retry
forever). Runs checkpoint every few rounds, so the same command restarted with
the surviving workers resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Iterator, List, Mapping, Optional, Sequence, Union

import grpc
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2, executor_pb2_grpc

from tff_meta.runtime import contexts, tls as tls_lib
from tff_meta.runtime.workers import (DEFAULT_MAX_CONCURRENT_CALLS, PortInUseError,
                                      WorkerProcess, close_channel)


WORKER_LOST_EXIT_CODE = 3
LOCAL_PORT_FLAG = '--local_worker_port'
PICK_TRIES = 3   # free ports picked for a local worker before its port error stands


class WorkerUnavailableError(RuntimeError):
  """A worker of the pool cannot be reached; the message names it and the fix."""


class WorkerLostError(WorkerUnavailableError):
  """A worker of a running job stopped answering; programs exit with WORKER_LOST_EXIT_CODE."""


def parse_addresses(text: str) -> List[str]:
  addresses = [a.strip() for a in text.split(',') if a.strip()]
  for a in addresses:
    host, _, port = a.rpartition(':')
    if not host or not port.isdigit():
      raise ValueError(f'Worker address {a!r} is not host:port (e.g. localhost:8000).')
  if not addresses:
    raise ValueError('--workers needs at least one host:port.')
  return addresses


def _unreachable(channel: grpc.Channel, confirm_s: float) -> bool:
  """True if nothing answers on `channel`, now and for `confirm_s`.

  The probe is `DisposeExecutor` of no executor, which a live worker answers
  at once (even mid-computation) and which changes nothing. The first call
  fails fast (UNAVAILABLE) only when nothing listens; a slow answer means a
  busy worker, which is alive. The confirming call waits up to `confirm_s` for
  a connection, so a worker that is merely reconnecting counts as alive.
  """
  stub = executor_pb2_grpc.ExecutorGroupStub(channel)
  request = executor_pb2.DisposeExecutorRequest()
  try:
    stub.DisposeExecutor(request, timeout=confirm_s)
    return False
  except grpc.RpcError as e:
    if e.code() != grpc.StatusCode.UNAVAILABLE:
      return False   # it answered with an error, or is too busy to answer: alive
  try:
    stub.DisposeExecutor(request, timeout=confirm_s, wait_for_ready=True)
    return False
  except grpc.RpcError as e:
    return e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class WorkerPool:
  """Connects to TFF workers; `context` runs computations across all of them.

  Args:
    addresses: host:port of each running `worker_binary` (see programs/worker.py).
    owned: local `WorkerProcess`es this pool started and must stop on close().
    tls: the trainer's CA, certificate and key for workers behind mutual TLS
      (`tls.TlsFiles`); None: plain gRPC, with a warning for any address
      beyond loopback.
  """

  def __init__(self, addresses: Sequence[str], *, owned: Sequence[WorkerProcess] = (),
               ready_timeout_s: float = 30.0, tls: Optional[tls_lib.TlsFiles] = None):
    self.addresses = list(addresses)
    self._owned = list(owned)
    self.tls = tls
    if tls is None:
      tls_lib.warn_plain(self.addresses)
    self._channels = [tls_lib.open_channel(a, tls) for a in self.addresses]
    self._stubs = [tff.framework.RemoteExecutorGrpcStub(c) for c in self._channels]
    deadline = time.monotonic() + ready_timeout_s
    for address, stub in zip(self.addresses, self._stubs):
      while not stub.is_ready:
        if time.monotonic() > deadline:
          self.close()
          how = (' over mutual TLS (is it serving with --tls_ca/--tls_cert/--tls_key, does its '
                 'certificate name '
                 f'{address.rpartition(":")[0]}, and did the same CA sign it and the trainer\'s?)'
                 if tls else '')
          raise WorkerUnavailableError(
              f'TFF worker at {address} is not reachable{how} after {ready_timeout_s:.0f}s. '
              f'Start it (python -m programs.worker --port={address.rpartition(":")[2]}) or '
              'leave it out of --workers.')
        time.sleep(0.05)
    # Evaluation returns per-client (CLIENTS-placed) values, which the
    # mergeable form cannot carry; it runs on the first worker.
    self.eval_context = contexts.sync_context_for_stub(self._stubs[0])
    if len(self._stubs) == 1:
      self.context = self.eval_context
    else:
      self.context = tff.backends.native.create_mergeable_comp_execution_context(
          [contexts.async_context_for_stub(s) for s in self._stubs])

  @classmethod
  def local(cls, num_workers: int = 1, log_dir: Optional[str] = None,
            env: Union[None, Mapping[str, str], Sequence[Mapping[str, str]]] = None,
            max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
            first_port: int = 0) -> 'WorkerPool':
    """Starts `num_workers` local workers (stopped by PID on close()).

    `max_concurrent_calls`: computation calls each worker runs at once (-1: no
    bound; `WorkerProcess`).

    `first_port`: 0 picks a free port for each worker (another, up to
    PICK_TRIES times, if a program takes it before the worker binds it); N
    gives the workers ports N, N+1, ...; one in use is a `PortInUseError`
    naming --local_worker_port.

    `env`: extra environment variables for every worker (a mapping), or one
    mapping per worker (a sequence), e.g. each its own CUDA_VISIBLE_DEVICES.
    """
    envs = list(env) if isinstance(env, (list, tuple)) else [env] * num_workers
    if len(envs) != num_workers:
      raise ValueError(f'env has {len(envs)} entries for {num_workers} workers.')
    workers = []
    try:
      for i, worker_env in enumerate(envs):
        for attempt in range(1 if first_port else PICK_TRIES):
          try:
            workers.append(WorkerProcess(
                port=first_port + i if first_port else None, log_dir=log_dir, env=worker_env,
                max_concurrent_calls=max_concurrent_calls, port_flag=LOCAL_PORT_FLAG))
            break
          except PortInUseError:
            if first_port or attempt == PICK_TRIES - 1:
              raise
    except BaseException:
      for w in workers:
        w.stop()
      raise
    return cls([f'localhost:{w.port}' for w in workers], owned=workers)

  def resident_mb(self) -> float:
    """Resident memory of the workers this pool started, summed, in MB; NaN for a pool of
    workers started elsewhere (their memory is not this machine's to read)."""
    if not self._owned:
      return float('nan')
    return float(sum(w.resident_mb() for w in self._owned))

  def dead_workers(self, confirm_s: float = 2.0) -> List[str]:
    """Workers that do not answer a probe call and cannot be reached within `confirm_s`.

    Each worker is asked directly (`_unreachable`), never through the channel's
    cached connectivity: that is updated by a callback some time after a
    worker dies, and a round's own gRPC call may fail before it is.
    """
    return [address for address, channel in zip(self.addresses, self._channels)
            if _unreachable(channel, confirm_s)]

  def _message(self, dead: Sequence[str], what: str) -> str:
    alive = [a for a in self.addresses if a not in dead]
    fix = (f'Restart them, or rerun the same command with --workers={",".join(alive)}; '
           'the run resumes from its last checkpoint.' if alive else
           'Restart the workers and rerun the same command; it resumes from its last checkpoint.')
    return (f'TFF worker(s) {", ".join(dead)} stopped answering'
            f'{" during " + what if what else ""}. {fix}')

  def check(self, what: str = '') -> None:
    """Raises WorkerUnavailableError naming any worker that stopped answering."""
    dead = self.dead_workers()
    if dead:
      raise WorkerLostError(self._message(dead, what))

  @contextlib.contextmanager
  def watch(self, what: str, poll_s: float = 0.5) -> Iterator[None]:
    """Guards a blocking call on the pool against a worker dying mid-call.

    TFF retries gRPC calls to an unreachable worker indefinitely, so a round
    whose worker dies would hang. The watchdog confirms the death, prints the
    error naming the worker and the fix, and ends the process with exit code
    `WORKER_LOST_EXIT_CODE`. Checkpoints and released metric rows are already
    on disk; owned local workers die with the process (PR_SET_PDEATHSIG).
    """
    done = threading.Event()

    def watchdog():
      while not done.wait(poll_s):
        dead = self.dead_workers()
        if dead and not done.is_set():
          print(f'error: {self._message(dead, what)}', file=sys.stderr, flush=True)
          for worker in self._owned:
            worker.stop()
          os._exit(WORKER_LOST_EXIT_CODE)  # pylint: disable=protected-access

    thread = threading.Thread(target=watchdog, name='tff-worker-watchdog', daemon=True)
    thread.start()
    try:
      yield
    except Exception:   # e.g. the resident paths' own gRPC calls fail first
      done.set()
      dead = self.dead_workers()
      if dead:
        raise WorkerLostError(self._message(dead, what)) from None
      raise
    finally:
      done.set()

  def close(self) -> None:
    for channel in self._channels:
      close_channel(channel)
    for worker in self._owned:
      worker.stop()

  def __enter__(self) -> 'WorkerPool':
    return self

  def __exit__(self, *exc) -> None:
    self.close()


@contextlib.contextmanager
def local_context(log_dir: Optional[str] = None) -> Iterator:
  """Starts a local C++ worker, installs its sync context, stops the worker on exit."""
  with WorkerPool.local(1, log_dir=log_dir) as pool:
    with tff.framework.get_context_stack().install(pool.context):
      yield pool.context
