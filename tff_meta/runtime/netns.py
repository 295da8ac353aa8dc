"""A worker_binary that no other host can reach: its own network namespace, bridged by a file.

TFF's `worker_binary` listens on every interface ("[::]:port" is built into
it). Behind a TLS front (tls.py) its plain port must not be reachable from
other hosts. On Linux, as root, the worker is started in a network namespace
of its own whose only interface is loopback (`isolate` runs in the child
before exec), and `Bridge` connects a Unix socket in a private folder to the
worker's 127.0.0.1:port inside that namespace. A Unix socket is named by a
file, not a network address, so the TLS front in the host's namespace
reaches it with `grpc.insecure_channel('unix:<path>')`, and nothing else
can: the folder is mode 0700.

Without root (a namespace needs CAP_SYS_ADMIN, which a container's root
usually lacks) `available()` is False and the worker listens on the host's
network as before; programs.worker then says so and which port to firewall.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
from typing import List

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def _libc():
  return ctypes.CDLL(None, use_errno=True)


_CAP_NET_ADMIN, _CAP_SYS_ADMIN = 12, 21


def _effective_capabilities() -> int:
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('CapEff:'):
          return int(line.split()[1], 16)
  except (OSError, ValueError, IndexError):
    pass
  return 0


def available() -> bool:
  """Whether this process may give a child its own network namespace and bring up its
  loopback (Linux, CAP_SYS_ADMIN and CAP_NET_ADMIN: root outside a container; a
  container's root usually lacks CAP_SYS_ADMIN)."""
  caps = _effective_capabilities()
  return (sys.platform.startswith('linux') and os.path.exists('/proc/self/ns/net') and
          bool(caps >> _CAP_SYS_ADMIN & 1) and bool(caps >> _CAP_NET_ADMIN & 1))


def isolate() -> None:
  """In a child before exec: a new network namespace, with its loopback up."""
  if _libc().unshare(CLONE_NEWNET) != 0:
    err = ctypes.get_errno()
    raise OSError(err, f'unshare(CLONE_NEWNET): {os.strerror(err)}')
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    flags = struct.unpack('16sH', fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack('16sH14x', b'lo', 0))[:18])[1]
    fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack('16sH14x', b'lo', flags | _IFF_UP))


def _pump(source: socket.socket, sink: socket.socket, done) -> None:
  try:
    while True:
      data = source.recv(1 << 20)
      if not data:
        break
      sink.sendall(data)
  except OSError:
    pass
  for s, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
    try:
      s.shutdown(how)
    except OSError:
      pass
  done()


class Bridge:
  """`address` ('unix:<path>') leads to 127.0.0.1:`port` in the network namespace of `pid`."""

  def __init__(self, pid: int, port: int):
    self._folder = tempfile.mkdtemp(prefix='tff_worker_')   # mode 0700
    self.path = os.path.join(self._folder, 'executor.sock')
    self.address = f'unix:{self.path}'
    self._port = port
    self._namespace = os.open(f'/proc/{pid}/ns/net', os.O_RDONLY)
    self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    self._listener.bind(self.path)
    self._listener.listen(64)
    self._open: List[socket.socket] = []
    self._lock = threading.Lock()
    self._entered = threading.Event()
    self._error = None
    self._thread = threading.Thread(target=self._serve, name='tff-worker-bridge', daemon=True)
    self._thread.start()
    self._entered.wait()
    if self._error:
      self.close()
      raise OSError(self._error, f'setns into the worker\'s network: {os.strerror(self._error)}')

  def _serve(self) -> None:
    # This thread alone joins the worker's namespace: the sockets it creates are in there.
    if _libc().setns(self._namespace, CLONE_NEWNET) != 0:
      self._error = ctypes.get_errno()
    self._entered.set()
    if self._error:
      return
    while True:
      try:
        client, _ = self._listener.accept()
      except OSError:
        return   # closed
      try:
        worker = socket.create_connection(('127.0.0.1', self._port))
      except OSError:
        client.close()   # the worker is gone: the caller sees the connection end
        continue
      with self._lock:
        self._open += [client, worker]
      pending = [2]

      def done(pair=(client, worker)):
        with self._lock:
          pending[0] -= 1
          if pending[0] == 0:   # both directions ended
            for s in pair:
              s.close()
            self._open = [s for s in self._open if s not in pair]
      for a, b in ((client, worker), (worker, client)):
        threading.Thread(target=_pump, args=(a, b, done), daemon=True).start()

  def close(self) -> None:
    try:
      self._listener.shutdown(socket.SHUT_RDWR)
    except OSError:
      pass
    self._listener.close()
    with self._lock:
      for s in self._open:
        s.close()
      self._open = []
    try:
      os.close(self._namespace)
    except OSError:
      pass
    shutil.rmtree(self._folder, ignore_errors=True)
