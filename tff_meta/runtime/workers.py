"""TFF C++ worker processes that this project starts and stops, by PID.

TFF's default local context starts `worker_binary` and never stops it
(its `__del__` fails at interpreter shutdown, TFF_NOTES): orphans pile up and
keep the parent's stdout open. We start the same binary ourselves, with its
output in a log file, in its own process group, remember every PID, and stop
them on `stop()`, on interpreter exit (atexit), and on SIGTERM (then the SIGTERM
handler that was there before runs: a program's, `program.cli`'s one `error:`
line and exit 143; in library use the default action ends the process). On Linux the
worker also gets SIGTERM from the kernel if our process dies by SIGKILL
(PR_SET_PDEATHSIG), so not even a killed run leaves a worker behind. Its new
session keeps the program's niceness across Linux autogroups (priority.py).

A worker that cannot start says why, in one line: a port already in use is
found before the worker starts (`PortInUseError`, naming the port and the
flag that chooses another: the caller's `port_flag`), or in its log if another
program took the port meanwhile; any other early exit is a `WorkerStartError`
quoting the last lines of the worker's log. Channels are closed through
`close_channel`, after gRPC's connectivity poller has stopped, so no gRPC
thread prints a traceback ("Cannot monitor channel state: Channel closed!")
after the program's last line.
"""

from __future__ import annotations

import atexit
import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, Mapping, Optional

import grpc
import portpicker
import tensorflow_federated as tff

from tff_meta.core import cli
from tff_meta.runtime import netns, priority

GRPC_OPTIONS = [('grpc.max_message_length', 2_000_000_000),
                ('grpc.max_receive_message_length', 2_000_000_000),
                ('grpc.max_send_message_length', 2_000_000_000)]

_LIVE: Dict[int, 'WorkerProcess'] = {}
_LOCK = threading.Lock()
LOG_TAIL_LINES = 4   # of a worker that exited at start, quoted in the error


class WorkerStartError(RuntimeError):
  """A worker exited, or never became ready, at start; the message quotes its log's end."""


class PortInUseError(WorkerStartError):
  """The worker's port is taken by another program; names the port and the flag to change."""

  def __init__(self, port: int, port_flag: str):
    super().__init__(f'port {port} is already in use (another program listens on it), so the '
                     f'TFF worker cannot serve there; choose a free port with {port_flag}.')
    self.port = port


def port_in_use(port: int) -> bool:
  """Whether another socket holds `port` on this host (what the worker binds: every
  interface, IPv6 and IPv4)."""
  for family, address in ((socket.AF_INET6, '::'), (socket.AF_INET, '0.0.0.0')):
    try:
      with socket.socket(family, socket.SOCK_STREAM) as s:
        # As gRPC and the TLS front bind: connections of a stopped server left in TIME_WAIT
        # do not hold the port, only a listening socket does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
          s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind((address, port))
      return False
    except OSError as e:
      if e.errno == errno.EADDRINUSE:
        return True
      if e.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):   # no IPv6 here: try IPv4
        return False
  return False


def _log_end(path: str, size: int = 64 * 1024) -> str:
  """The last `size` bytes of a log as text; '' when it cannot be read."""
  try:
    with open(path, 'rb') as f:
      f.seek(0, os.SEEK_END)
      f.seek(max(0, f.tell() - size))
      return f.read().decode('utf-8', 'replace')
  except OSError:
    return ''


def log_tail(path: str, lines: int = LOG_TAIL_LINES, width: int = 160) -> str:
  """The last `lines` non-empty lines of a log, each cut to `width` characters, joined by
  ' | ' (for a one-line error); '' when it is empty or unreadable."""
  text = _log_end(path)
  kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
  return ' | '.join(line if len(line) <= width else line[:width - 3] + '...' for line in kept)


def close_channel(channel: grpc.Channel, wait_s: float = 1.0) -> None:
  """Closes `channel` once gRPC's connectivity poller has stopped.

  A channel someone subscribed to (TFF's `RemoteExecutorGrpcStub` does, for
  `is_ready`) has a gRPC thread polling its state every 0.2 s; a close under
  it makes that thread raise "ValueError: Cannot monitor channel state: Channel
  closed!" with a traceback. The subscriptions are dropped first (as
  `close()` itself does, through grpc's channel state) and the poller gets up
  to `wait_s` to see it and end."""
  state = getattr(channel, '_connectivity_state', None)   # grpc's; absent: close at once
  if state is not None:
    with state.lock:
      del state.callbacks_and_connectivities[:]
      state.try_to_connect = False
    deadline = time.monotonic() + wait_s
    while getattr(state, 'polling', False) and time.monotonic() < deadline:
      time.sleep(0.01)
  try:
    channel.close()
  except Exception:  # pylint: disable=broad-except
    pass


def _die_with_parent() -> None:
  """In the child: ask Linux to SIGTERM the worker if our process dies, even by SIGKILL."""
  if sys.platform.startswith('linux'):
    import ctypes  # pylint: disable=g-import-not-at-top
    pr_set_pdeathsig = 1
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _isolated_die_with_parent() -> None:
  _die_with_parent()
  netns.isolate()


def worker_binary_path() -> str:
  path = os.path.join(os.path.dirname(tff.__file__), 'data', 'worker_binary')
  if not os.path.isfile(path):
    raise RuntimeError(f'TFF worker binary not found at {path}; reinstall tensorflow-federated==0.87.0.')
  return path


# Every worker: fewer malloc arenas, less fragmentation across threads.
WORKER_DEFAULT_ENV = {'MALLOC_ARENA_MAX': '2'}

# Memory-bounded allocation (docs/DECISIONS.md, "Worker memory";
# docs/runs/worker_memory):
# - TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1: TF's oneDNN build otherwise keeps every tensor
#   of 256 KiB or more in a BFC pool that never returns memory and fragments over
#   the varying shapes of clients' data;
# - MALLOC_MMAP_THRESHOLD_=1048576: glibc then maps every block of 1 MiB or more
#   on its own and returns it when freed (a fixed threshold also stops glibc
#   from raising it to the largest block freed).
# Those fresh pages cost CPU (1.6-2.3x the worker's CPU on the FEMNIST
# Table 2 cells), so workers get them only on machines with less than
# BOUNDED_BELOW_BYTES of memory, where the memory matters more; elsewhere set
# them in the environment to have them.
BOUNDED_MEMORY_ENV = {'TF_ONEDNN_USE_SYSTEM_ALLOCATOR': '1', 'MALLOC_MMAP_THRESHOLD_': '1048576'}
BOUNDED_BELOW_BYTES = 16 * 2**30


def machine_memory_bytes() -> float:
  """MemTotal of /proc/meminfo in bytes; NaN where it cannot be read."""
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemTotal:'):
          return float(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  return float('nan')


def default_env(memory_bytes: Optional[float] = None) -> Dict[str, str]:
  """The environment every worker starts with: `WORKER_DEFAULT_ENV`, plus
  `BOUNDED_MEMORY_ENV` on a machine with less than `BOUNDED_BELOW_BYTES` of
  memory (`memory_bytes`, this machine's by default)."""
  memory = machine_memory_bytes() if memory_bytes is None else memory_bytes
  env = dict(WORKER_DEFAULT_ENV)
  if memory < BOUNDED_BELOW_BYTES:
    env.update(BOUNDED_MEMORY_ENV)
  return env


# Computation calls one worker runs at once; -1 = no bound (TFF's default).
DEFAULT_MAX_CONCURRENT_CALLS = -1


def check_max_concurrent_calls(value: int) -> None:
  """Raises ValueError unless `value` is -1 (no bound) or >= 1."""
  if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != -1):
    raise ValueError(f'max_concurrent_calls must be -1 (no bound) or >= 1, got {value!r}.')


def status_kib(pid: int, key: str) -> float:
  """Field `key` of /proc/<pid>/status (e.g. 'VmRSS', 'VmHWM') in KiB; NaN when unreadable."""
  try:
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        if line.startswith(key + ':'):
          return float(line.split()[1])   # the kernel writes kB, meaning KiB
  except (OSError, ValueError, IndexError):
    pass
  return float('nan')


def resident_mb(pid: int) -> float:
  """VmRSS of process `pid` in MB (10^6 bytes) from /proc; NaN when it cannot be read."""
  return status_kib(pid, 'VmRSS') * 1024 / 1e6


class WorkerProcess:
  """One `worker_binary` on localhost; use as a context manager or call stop().

  Its output goes to `<log_dir>/tff_worker_<port>.log` (the temp folder by
  default); stop() deletes that file if the worker wrote nothing to it.

  `env`: variables set for the worker on top of this process's environment,
  e.g. {'CUDA_VISIBLE_DEVICES': '0'} (see program/executor.py, --client_devices).
  `default_env()` comes first: two malloc arenas, and on a machine with less
  than 16 GiB the settings that keep the worker's memory at what its
  computations hold (`BOUNDED_MEMORY_ENV`); an explicit value in the
  environment or `env` wins.

  `max_concurrent_calls`: how many computation calls the worker runs at
  once (its --max_concurrent_computation_calls); -1 = no bound, so a round
  runs all its clients together and holds all their memory at once.

  `private_network`: run the worker in a network namespace of its own, so no
  other host can reach its port (needs root: `netns.available()`); it is
  reached through `address`, a Unix socket (`netns.Bridge`). Otherwise
  `address` is localhost:port.
  """

  def __init__(self, port: Optional[int] = None, log_dir: Optional[str] = None,
               ready_timeout_s: float = 60.0, env: Optional[Mapping[str, str]] = None,
               max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
               private_network: bool = False, port_flag: str = '--port'):
    check_max_concurrent_calls(max_concurrent_calls)
    self.max_concurrent_calls = max_concurrent_calls
    self.port = port or portpicker.pick_unused_port()
    if not private_network and port_in_use(self.port):
      raise PortInUseError(self.port, port_flag)
    self.env = {k: v for k, v in default_env().items() if k not in os.environ}
    self.env.update(env or {})
    log_dir = log_dir or tempfile.gettempdir()
    os.makedirs(log_dir, exist_ok=True)
    self.log_path = os.path.join(log_dir, f'tff_worker_{self.port}.log')
    self._log = open(self.log_path, 'wb')
    self.process = subprocess.Popen(
        self.command(),
        stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, **self.env} if self.env else None,
        start_new_session=True, preexec_fn=priority.preexec_for_worker(
            _isolated_die_with_parent if private_network else _die_with_parent))
    with _LOCK:
      _LIVE[self.process.pid] = self
    _install_handlers()
    self.bridge = None
    self.address = f'localhost:{self.port}'
    if private_network:
      try:
        self.bridge = netns.Bridge(self.process.pid, self.port)
      except OSError:
        self.stop()
        raise
      self.address = self.bridge.address
    self.channel = grpc.insecure_channel(self.address, GRPC_OPTIONS)
    self.stub = tff.framework.RemoteExecutorGrpcStub(self.channel)
    deadline = time.monotonic() + ready_timeout_s
    while not self.stub.is_ready:
      if self.process.poll() is not None:
        self.stop(keep_log=True)
        self._log_start_failure(port_flag, f'exited with code {self.process.returncode}')
      if time.monotonic() > deadline:
        self.stop(keep_log=True)
        self._log_start_failure(port_flag, f'not ready after {ready_timeout_s:g}s')
      time.sleep(0.05)

  def _log_start_failure(self, port_flag: str, what: str):
    """Raises the error of a worker that did not start, from its log."""
    if 'Address already in use' in _log_end(self.log_path):   # gRPC's bind error
      raise PortInUseError(self.port, port_flag)
    tail = log_tail(self.log_path)
    raise WorkerStartError(
        f'the TFF worker on port {self.port} {what} at start; the end of its log '
        f'{self.log_path}: {tail or "(empty)"}')

  def command(self) -> list:
    """The worker binary's command line."""
    return [worker_binary_path(), f'--port={self.port}',
            f'--max_concurrent_computation_calls={self.max_concurrent_calls}']

  @property
  def pid(self) -> int:
    return self.process.pid

  def resident_mb(self) -> float:
    """The worker's resident memory (VmRSS) in MB; NaN once it has exited."""
    return resident_mb(self.process.pid)

  def stop(self, timeout_s: float = 10.0, keep_log: bool = False) -> None:
    """Stops the worker (SIGTERM, then SIGKILL) and reaps it.

    Its log is deleted if the worker wrote nothing to it, unless `keep_log`
    (a worker that failed to start: the error message names the log).
    """
    with _LOCK:
      _LIVE.pop(self.process.pid, None)
    if self.process.poll() is None:
      try:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
      except ProcessLookupError:
        pass
    close_channel(self.channel)
    if getattr(self, 'bridge', None) is not None:
      self.bridge.close()
    if not self._log.closed:
      self._log.close()
      if not keep_log:
        _remove_if_empty(self.log_path)

  def __enter__(self) -> 'WorkerProcess':
    return self

  def __exit__(self, *exc) -> None:
    self.stop()


def _remove_if_empty(path: str) -> None:
  """Deletes a worker log the worker wrote nothing to (the usual case), so run folders keep
  only logs worth reading; one with any output stays."""
  try:
    if os.path.getsize(path) == 0:
      os.remove(path)
  except OSError:
    pass


def live_pids() -> list[int]:
  with _LOCK:
    return sorted(_LIVE)


def stop_all_workers() -> None:
  with _LOCK:
    workers = list(_LIVE.values())
  for worker in workers:
    worker.stop()


_HANDLERS_INSTALLED = False


def _install_handlers() -> None:
  global _HANDLERS_INSTALLED
  if _HANDLERS_INSTALLED:
    return
  _HANDLERS_INSTALLED = True
  atexit.register(stop_all_workers)
  previous = signal.getsignal(signal.SIGTERM)
  if threading.current_thread() is threading.main_thread() and previous != signal.SIG_IGN:

    def on_sigterm(signum, frame):
      cli.TERMINATING.set()   # what the stopped workers' calls raise now is the termination
      stop_all_workers()
      if callable(previous):
        previous(signum, frame)
      else:   # SIG_DFL or None (not set from Python): end as if this handler were not there
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    signal.signal(signal.SIGTERM, on_sigterm)

