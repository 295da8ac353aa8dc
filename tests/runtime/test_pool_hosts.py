"""A TLS worker pool across hosts: each worker in its own network namespace, its own address.

The test's process is the trainer's host. Each worker host is a network
namespace joined to it by a veth pair, with addresses in 10.59.K.0/30 and
10.59.K.4/30 (K from the test's PID), used only inside the namespaces this
test makes. It trains the demo config over real TCP with mutual TLS, one link
delayed by a TCP proxy (this kernel has no netem), kills one worker host
mid-round, and resumes; a stranger is refused. Every process is stopped by
PID and the namespaces are deleted at the end. Without root or `ip`, it skips.
"""

import asyncio
import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import grpc
import pytest

from tests import helpers
from tests.conftest import REPO
from tests.runtime import tls_helpers
from tff_meta.runtime import cert_files, tls
from tff_meta.runtime.pool import WORKER_LOST_EXIT_CODE

PORT = 8443
DELAY_S = 0.02


def _ip(*args, check=True):
  return subprocess.run(['ip', *args], capture_output=True, text=True, check=check, timeout=30)


class Hosts:
  """Network namespaces, each a worker host joined to this one by a veth pair."""

  def __init__(self, count):
    tag = os.getpid() % 100000
    block = os.getpid() % 250
    self.names, self.addresses, self._links = [], [], []
    for i in range(count):
      name, link = f'tffmeta-test-{tag}-{i}', f'tm{tag}h{i}'
      ours, theirs = f'10.59.{block}.{4 * i + 1}', f'10.59.{block}.{4 * i + 2}'
      _ip('netns', 'add', name)
      self.names.append(name)
      _ip('link', 'add', link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', name)
      self._links.append(link)
      _ip('addr', 'add', f'{ours}/30', 'dev', link)
      _ip('link', 'set', link, 'up')
      for args in (('addr', 'add', f'{theirs}/30', 'dev', 'eth0'), ('link', 'set', 'eth0', 'up'),
                   ('link', 'set', 'lo', 'up')):
        _ip('netns', 'exec', name, 'ip', *args)
      self.addresses.append(theirs)

  def prefix(self, i):
    return ['ip', 'netns', 'exec', self.names[i]]

  def delete(self):
    for link in self._links:   # gone with its namespace already, unless that failed
      _ip('link', 'del', link, check=False)
    for name in self.names:
      _ip('netns', 'del', name, check=False)


def _skip_reason():
  if not sys.platform.startswith('linux') or os.geteuid() != 0:
    return 'network namespaces need root (ip netns add); run as root to test a pool across hosts'
  if shutil.which('ip') is None:
    return 'the ip command (iproute2) is missing; apt-get install iproute2'
  name = f'tffmeta-probe-{os.getpid()}'
  made = _ip('netns', 'add', name, check=False)
  if made.returncode != 0:
    return f'cannot create a network namespace here: {made.stderr.strip()}'
  _ip('netns', 'del', name, check=False)
  return None


class DelayProxy:
  """A TCP proxy on 127.0.0.1 that holds every chunk `delay_s` before passing it on."""

  def __init__(self, target, delay_s):
    self.target, self.delay_s, self.bytes = target, delay_s, 0
    self._loop = asyncio.new_event_loop()
    self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
    self._thread.start()
    self._server = asyncio.run_coroutine_threadsafe(
        asyncio.start_server(self._handle, '127.0.0.1', 0), self._loop).result()
    self.port = self._server.sockets[0].getsockname()[1]

  async def _pipe(self, reader, writer):
    try:
      while data := await reader.read(1 << 16):
        await asyncio.sleep(self.delay_s)
        self.bytes += len(data)
        writer.write(data)
        await writer.drain()
    except (ConnectionError, OSError):
      pass
    finally:
      writer.close()

  async def _handle(self, reader, writer):
    try:
      up_reader, up_writer = await asyncio.open_connection(*self.target)
    except OSError:
      writer.close()
      return
    await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

  def stop(self):
    async def close():
      self._server.close()
      await self._server.wait_closed()
    asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
    self._loop.call_soon_threadsafe(self._loop.stop)
    self._thread.join(timeout=10)


@pytest.fixture(scope='module')
def pool_hosts(tmp_path_factory):
  reason = _skip_reason()
  if reason:
    pytest.skip(reason)
  hosts = Hosts(2)
  try:
    yield hosts
  finally:
    hosts.delete()
  assert not any(n in _ip('netns', 'list').stdout for n in hosts.names)


def _start(hosts, i, certs, log, wait=True):
  return tls_helpers.TlsWorker(certs, PORT, prefix=hosts.prefix(i), log=log, wait=wait)


def _bridge_folder(worker):
  found = re.search(r'through unix:(\S+)/executor\.sock', worker.banner)
  return found and found.group(1)


def _stop(worker):
  worker.stop()
  if not worker.banner:
    return
  folder = _bridge_folder(worker)   # left behind by a worker killed with SIGKILL, as is
  if folder:                        # its empty log
    shutil.rmtree(folder, ignore_errors=True)
  log = re.search(r'; log (\S+)$', worker.banner.strip()).group(1)
  if os.path.exists(log) and os.path.getsize(log) == 0:
    os.remove(log)


def _train(workers, certs, out, extra=(), wait=True):
  cmd = [sys.executable, '-m', 'programs.train', '--config=configs/demo/digits.toml',
         '--algorithm=fedmeta_maml', '--rounds=16', '--eval_every=8', '--checkpoint_every=2',
         '--progress=false', f'--output_dir={out}', '--executor=workers',
         f'--workers={",".join(workers)}', *tls_helpers.tls_flags(certs, 'trainer'), *extra]
  if not wait:
    return subprocess.Popen(cmd, cwd=REPO, env=helpers.program_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  return subprocess.run(cmd, cwd=REPO, env=helpers.program_env(), capture_output=True, text=True,
                        timeout=900)


def _rows(run):
  with open(os.path.join(run, 'metrics.csv'), newline='') as f:
    return [(int(r['round']), float(r['train_loss']), float(r['train_accuracy']))
            for r in csv.DictReader(f)]


def _scores(run):
  """The final test scores and the evaluation history (no timings)."""
  with open(os.path.join(run, 'results.json')) as f:
    result = json.load(f)
  summary = {k: result['summary'][k] for k in ('accuracy', 'client_mean', 'client_std', 'rounds')}
  history = [{k: v for k, v in row.items() if 'accuracy' in k or 'loss' in k}
             for row in result['history']]
  return summary, history


@pytest.mark.slow
def test_a_tls_pool_across_hosts(pool_hosts, tmp_path):
  hosts = pool_hosts
  certs, other = tmp_path / 'pool', tmp_path / 'other'
  cert_files.make_pool_certs(str(certs), hosts.addresses)
  cert_files.make_pool_certs(str(other), hosts.addresses)
  workers, proxy, run = [None, None], None, None
  try:
    for i in range(2):   # both start at once, then are waited for
      workers[i] = _start(hosts, i, certs, tmp_path / f'worker{i}.log', wait=False)
    for w in workers:
      w.wait()
    a = f'{hosts.addresses[0]}:{PORT}'

    # Strangers from the trainer's host: refused, and the worker runs nothing.
    with open(certs / 'ca.crt', 'rb') as f:
      ca = f.read()
    strangers = {'plain gRPC': grpc.insecure_channel(a),
                 'no certificate': grpc.secure_channel(a, grpc.ssl_channel_credentials(ca)),
                 'another CA': tls.open_channel(a, tls.TlsFiles.load(
                     f'{other}/ca.crt', f'{other}/trainer.crt', f'{other}/trainer.key', 'x'))}
    for who, channel in strangers.items():
      mark = tmp_path / f'{who}.ran'
      assert tls_helpers.refused(channel, tls_helpers.marker_computation(str(mark))), who
      assert not mark.exists(), who
      channel.close()
    trainer = tls.TlsFiles.load(f'{certs}/ca.crt', f'{certs}/trainer.crt',
                                f'{certs}/trainer.key', 'x')
    channel = tls.open_channel(a, trainer)
    assert tls_helpers.run_on(channel, tls_helpers.marker_computation(str(tmp_path / 'ok'))) == 1
    channel.close()
    assert (tmp_path / 'ok').read_text() == 'ran'   # the same path with the certificate runs
    # The executor's own plain port is not on the host's network: only the TLS port is.
    inner = int(re.search(r'tff_worker_(\d+)\.log', workers[0].banner).group(1))
    with pytest.raises(ConnectionRefusedError):
      socket.create_connection((hosts.addresses[0], inner), timeout=5).close()
    socket.create_connection((hosts.addresses[0], PORT), timeout=5).close()

    # The link to worker host 1 is delayed; results equal 2 local workers'.
    proxy = DelayProxy((hosts.addresses[1], PORT), DELAY_S)
    pool = [a, f'127.0.0.1:{proxy.port}']   # the worker's certificate names 127.0.0.1 too
    local = subprocess.Popen(   # the reference, 2 local workers, alongside
        [sys.executable, '-m', 'programs.train', '--config=configs/demo/digits.toml',
         '--algorithm=fedmeta_maml', '--rounds=16', '--eval_every=8', '--checkpoint_every=2',
         '--progress=false', f'--output_dir={tmp_path / "local"}', '--executor=local',
         '--local_workers=2'], cwd=REPO, env=helpers.program_env(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
      ref = _train(pool, certs, tmp_path / 'ref')
      _, local_err = local.communicate(timeout=900)
    finally:
      if local.poll() is None:
        local.kill()
        local.wait()
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert proxy.bytes > 100_000   # the rounds did cross the delayed link
    assert local.returncode == 0, local_err[-3000:]
    assert len(_rows(tmp_path / 'ref')) == 16
    for (r1, loss1, acc1), (r2, loss2, acc2) in zip(_rows(tmp_path / 'ref'),
                                                    _rows(tmp_path / 'local')):
      assert r1 == r2 and acc1 == pytest.approx(acc2, abs=1e-9)
      assert loss1 == pytest.approx(loss2, rel=1e-5)

    # Worker host 0 dies mid-run: the lost-worker error; restarted, the run resumes to the
    # uninterrupted run's result.
    out = tmp_path / 'killed'
    run = _train(pool, certs, out, wait=False)
    deadline = time.time() + 600
    while not (out / 'checkpoints' / 'program_state_6').exists():
      assert run.poll() is None, run.stderr.read()[-3000:]
      assert time.time() < deadline
      time.sleep(0.02)
    executor = workers[0].executor_pid
    workers[0].stop(signal.SIGKILL)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == WORKER_LOST_EXIT_CODE, stderr[-3000:]
    assert f'error: TFF worker(s) {a} stopped answering during' in stderr, stderr[-3000:]
    assert helpers.csv_rounds(out / 'metrics.csv')[-1] < 16
    deadline = time.time() + 30
    while helpers.alive(executor):   # its worker_binary follows it (PR_SET_PDEATHSIG)
      assert time.time() < deadline
      time.sleep(0.05)
    _stop(workers[0])
    workers[0] = _start(hosts, 0, certs, tmp_path / 'worker0b.log')
    resumed = _train(pool, certs, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert 'Resuming FedMeta(MAML) from round' in resumed.stderr
    assert _rows(out) == _rows(tmp_path / 'ref')
    assert _scores(out) == _scores(tmp_path / 'ref')
  finally:
    if run is not None and run.poll() is None:   # a failed check left the trainer running
      run.kill()
      run.communicate()
    if proxy:
      proxy.stop()
    for w in workers:
      if w:
        _stop(w)
  for w in workers:
    assert not helpers.alive(w.pid) and not helpers.alive(w.executor_pid)
