"""Shared by the TLS pool tests: a TLS worker process, and a computation that leaves a mark."""

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import grpc
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tests.conftest import REPO

SERVING = re.compile(r'TFF worker serving on port (\d+) with mutual TLS \(executor pid (\d+)')


def tls_flags(certs, side='worker'):
  """The worker's (--tls_*) or the trainer's (--workers_tls_*) flags for a pool's folder."""
  prefix = '--tls_' if side == 'worker' else '--workers_tls_'
  return [f'{prefix}ca={certs}/ca.crt', f'{prefix}cert={certs}/{side}.crt',
          f'{prefix}key={certs}/{side}.key']


class TlsWorker:
  """`python -m programs.worker` with TLS (optionally under `prefix`, e.g. ip netns exec)."""

  def __init__(self, certs, port, prefix=(), log=None, wait=True):
    self.log_path = log
    self._log = open(log, 'w') if log else subprocess.DEVNULL
    self.process = subprocess.Popen(
        list(prefix) + [sys.executable, '-m', 'programs.worker', f'--port={port}'] +
        tls_flags(certs), cwd=REPO, env=helpers.program_env(), stdout=subprocess.PIPE,
        stderr=self._log, text=True, start_new_session=True)
    self.pid = self.process.pid
    self.executor_pid = self.banner = None
    if wait:
      self.wait()

  def wait(self, timeout_s=300):
    """Waits for the serving line; sets `banner` and `executor_pid`."""
    deadline = time.time() + timeout_s
    line = ''
    while not SERVING.search(line):
      line = self.process.stdout.readline()
      if not line and self.process.poll() is not None:
        raise RuntimeError(f'programs.worker exited with {self.process.returncode}: '
                           f'{self.log_text()[-2000:]}')
      assert time.time() < deadline, 'programs.worker did not start'
    self.executor_pid = int(SERVING.search(line).group(2))
    self.banner = line
    return self

  def log_text(self):
    if not self.log_path:
      return ''
    with open(self.log_path) as f:
      return f.read()

  def stop(self, sig=signal.SIGTERM):
    """Stops the worker (by its process group: programs.worker and its worker_binary)."""
    if self.process.poll() is None:
      try:
        os.killpg(self.process.pid, sig)
        self.process.wait(timeout=30)
      except subprocess.TimeoutExpired:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
      except ProcessLookupError:
        pass
    if self.process.stdout:
      self.process.stdout.close()
    if self._log is not subprocess.DEVNULL:
      self._log.close()


def marker_computation(path):
  """A TF computation that writes `path` when, and only when, a worker runs it."""

  @tff.tensorflow.computation
  def mark():
    with tf.control_dependencies([tf.io.write_file(path, 'ran')]):
      return tf.constant(1)
  return mark


def run_on(channel, comp):
  """Runs `comp` on the worker behind `channel` through TFF's remote executor; its result.

  Raises what TFF's stub raises when the worker cannot be reached (no retry).
  """
  stub = tff.framework.RemoteExecutorGrpcStub(channel)
  executor = tff.framework.RemoteExecutor(stub)

  async def call():
    executor.set_cardinalities({tff.CLIENTS: 0})
    compiled = tff.backends.native.compiler.desugar_and_transform_to_native(comp)
    fn = await executor.create_value(compiled, compiled.type_signature)
    return await (await executor.create_call(fn)).compute()
  try:
    return asyncio.run(call())
  finally:
    executor.close()


def refused(channel, comp):
  """Whether running `comp` through `channel` fails for want of a connection."""
  try:
    run_on(channel, comp)
  except grpc.RpcError as e:   # TFF wraps UNAVAILABLE in RetryableGRPCError, an RpcError
    return e.code() == grpc.StatusCode.UNAVAILABLE
  return False
