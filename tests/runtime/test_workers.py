"""Project-owned TFF workers are stopped by PID."""

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import types

import pytest

from tests.helpers import sigterm_after_first_line
from tff_meta.program import executor
from tff_meta.classification.config import ConfigError
from tff_meta.runtime import priority
from tff_meta.runtime import workers


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  # A zombie still answers kill(0); check its state.
  with open(f'/proc/{pid}/stat') as f:
    return f.read().split()[2] != 'Z'


def test_stop_kills_the_worker():
  worker = workers.WorkerProcess()
  pid = worker.pid
  assert pid in workers.live_pids() and _alive(pid)
  worker.stop()
  assert pid not in workers.live_pids() and not _alive(pid)


@pytest.mark.slow
def test_stop_deletes_an_empty_log_and_keeps_one_with_output(tmp_path):
  quiet = workers.WorkerProcess(log_dir=str(tmp_path))
  assert os.path.exists(quiet.log_path)
  quiet.stop()
  assert not os.path.exists(quiet.log_path)
  quiet.stop()   # a second stop (atexit after an explicit one) is harmless
  talking = workers.WorkerProcess(log_dir=str(tmp_path))
  with open(talking.log_path, 'ab') as f:   # what the worker would have written
    f.write(b'W external/...: something worth reading\n')
  talking.stop()
  assert os.path.getsize(talking.log_path) > 0
  assert os.listdir(tmp_path) == [os.path.basename(talking.log_path)]


@pytest.mark.slow
def test_worker_dies_with_a_sigkilled_parent(tmp_path):
  script = textwrap.dedent(f"""
      import sys, time
      sys.path.insert(0, {os.getcwd()!r})
      from tff_meta.runtime import workers
      w = workers.WorkerProcess()
      print(w.pid, flush=True)
      time.sleep(60)
  """)
  # Under `nice`: the worker's own session keeps the parent's niceness (runtime/priority.py).
  # `nice -n` adds to the test's own niceness (`make test` may itself run under nice).
  nice = priority.nice_under(3)
  parent = subprocess.Popen(['nice', '-n', '3', sys.executable, '-c', script],
                            stdout=subprocess.PIPE, text=True)
  worker_pid = int(parent.stdout.readline())
  assert _alive(worker_pid)
  if os.path.exists('/proc/self/autogroup'):
    assert priority.autogroup_nice(f'/proc/{worker_pid}/autogroup') == nice
  parent.send_signal(signal.SIGKILL)
  parent.wait()
  deadline = time.time() + 10
  while _alive(worker_pid) and time.time() < deadline:
    time.sleep(0.1)
  assert not _alive(worker_pid), 'worker outlived its SIGKILLed parent'


@pytest.mark.slow
def test_sigterm_in_library_use_stops_the_workers_then_ends_as_by_default():
  """No program handler (library use, e.g. a notebook's kernel): the workers are stopped, then
  SIGTERM's default action ends the process (the programs' message is program.cli's)."""
  script = textwrap.dedent(f"""
      import sys, time
      sys.path.insert(0, {os.getcwd()!r})
      from tff_meta.runtime import workers
      w = workers.WorkerProcess()
      print(w.pid, flush=True)
      time.sleep(120)
  """)
  first, code, err = sigterm_after_first_line(script)
  worker_pid = int(first)
  assert code == -signal.SIGTERM, err
  assert 'error:' not in err and 'Traceback' not in err
  assert not _alive(worker_pid)


def _command_line(pid):
  with open(f'/proc/{pid}/cmdline', 'rb') as f:
    return f.read().decode().split('\0')


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
def test_max_concurrent_calls_reaches_the_worker_command_line():
  flag_values = types.SimpleNamespace(executor='local', workers=None, local_workers=1,
                                      client_devices=None)
  with executor.make_pool(flag_values, max_concurrent_calls=3) as pool:
    command = _command_line(pool._owned[0].pid)  # pylint: disable=protected-access
    assert '--max_concurrent_computation_calls=3' in command
  with workers.WorkerProcess() as worker:   # the default: no bound
    assert '--max_concurrent_computation_calls=-1' in _command_line(worker.pid)


@pytest.mark.parametrize('value', [0, -2, True, 1.5])
def test_a_bad_max_concurrent_calls_starts_no_worker(value):
  before = workers.live_pids()
  with pytest.raises(ValueError, match='must be -1 \\(no bound\\) or >= 1'):
    workers.WorkerProcess(max_concurrent_calls=value)
  flag_values = types.SimpleNamespace(executor='local', workers=None, local_workers=1,
                                      client_devices=None)
  with pytest.raises(ConfigError, match='max_concurrent_calls'):
    executor.make_pool(flag_values, max_concurrent_calls=value)
  assert workers.live_pids() == before


def test_status_kib_reads_proc_and_is_nan_when_it_cannot():
  idle = subprocess.Popen(['sleep', '30'])   # its memory does not change while it sleeps
  try:
    time.sleep(0.2)
    with open(f'/proc/{idle.pid}/status') as f:
      fields = {l.split(':')[0]: l.split()[1] for l in f if l.startswith(('VmRSS:', 'VmHWM:'))}
    assert workers.status_kib(idle.pid, 'VmRSS') == float(fields['VmRSS']) > 0
    assert workers.status_kib(idle.pid, 'VmHWM') == float(fields['VmHWM'])
    assert workers.resident_mb(idle.pid) == float(fields['VmRSS']) * 1024 / 1e6   # KiB -> MB
    assert math.isnan(workers.status_kib(idle.pid, 'NoSuchField'))
  finally:
    idle.kill()
    idle.wait()
  assert math.isnan(workers.status_kib(idle.pid, 'VmRSS'))   # reaped: no /proc entry


def _environ(pid):
  with open(f'/proc/{pid}/environ', 'rb') as f:
    return dict(item.split('=', 1) for item in f.read().decode().split('\0') if '=' in item)


def test_the_bounded_allocator_is_the_default_below_16_gib():
  assert workers.default_env(8 * 2**30) == {'MALLOC_ARENA_MAX': '2',
                                            'TF_ONEDNN_USE_SYSTEM_ALLOCATOR': '1',
                                            'MALLOC_MMAP_THRESHOLD_': '1048576'}
  assert workers.default_env(24 * 2**30) == {'MALLOC_ARENA_MAX': '2'}
  assert workers.default_env(float('nan')) == {'MALLOC_ARENA_MAX': '2'}   # unknown: as before
  assert workers.machine_memory_bytes() > 2**30


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
def test_workers_start_with_the_allocator_settings(monkeypatch):
  # docs/runs/worker_memory: without them the FEMNIST Meta-SGD worker held 2.7 GB, not 4.6.
  monkeypatch.setattr(workers, 'machine_memory_bytes', lambda: 8 * 2**30)
  with workers.WorkerProcess() as worker:
    env = _environ(worker.pid)
  for key, value in workers.default_env(8 * 2**30).items():
    assert env[key] == os.environ.get(key, value)   # a value the user set wins
  with workers.WorkerProcess(env={'TF_ONEDNN_USE_SYSTEM_ALLOCATOR': '0'}) as worker:
    assert _environ(worker.pid)['TF_ONEDNN_USE_SYSTEM_ALLOCATOR'] == '0'


@pytest.mark.slow
def test_the_allocator_settings_change_no_result():
  """Two Meta-SGD rounds (weights of 1.3 MB, past both allocators' thresholds) give the
  same state and metrics bit for bit on a worker with the bounded settings and on one
  with TF's BFC pool and large blocks from glibc's heap."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tests import helpers  # pylint: disable=g-import-not-at-top
  from tff_meta.algorithms import fedmeta  # pylint: disable=g-import-not-at-top
  from tff_meta.runtime import contexts  # pylint: disable=g-import-not-at-top

  model = helpers.mlp_spec(hidden=5000)
  process = fedmeta.build_fedmeta_process(
      model, variant='metasgd', inner_lr=0.1, inner_steps=1, weighting='num_examples',
      server_optimizer=tff.learning.optimizers.build_adam(learning_rate=0.01))
  batch = [helpers.episode(c) for c in helpers.digits_protocol().train[:4]]
  outputs = []
  for env in (workers.BOUNDED_MEMORY_ENV,
              {'TF_ONEDNN_USE_SYSTEM_ALLOCATOR': '0', 'MALLOC_MMAP_THRESHOLD_': str(2**25)}):
    with workers.WorkerProcess(env=env) as worker:
      with tff.framework.get_context_stack().install(contexts.sync_context_for(worker)):
        state = initial = process.initialize()
        for _ in range(2):
          state, metrics = process.next(state, batch)
    outputs.append([np.asarray(x) for x in tf.nest.flatten((state, metrics))])
  for a, b in zip(*outputs):
    np.testing.assert_array_equal(a, b)
  assert not np.array_equal(outputs[0][0], tf.nest.flatten(initial)[0])   # the rounds moved it


# --------------------------------------------------------------------------- start-up failures

def _listening_socket():
  import socket  # pylint: disable=g-import-not-at-top
  s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
  s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
  s.bind(('::', 0))
  s.listen()
  return s


def test_a_port_in_use_is_refused_before_a_worker_starts():
  live = workers.live_pids()
  with _listening_socket() as s:
    port = s.getsockname()[1]
    assert workers.port_in_use(port)
    with pytest.raises(workers.PortInUseError) as e:
      workers.WorkerProcess(port=port, port_flag='--some_port')
  assert str(e.value) == (f'port {port} is already in use (another program listens on it), so '
                          'the TFF worker cannot serve there; choose a free port with '
                          '--some_port.')
  assert e.value.port == port and workers.live_pids() == live
  assert not workers.port_in_use(port)


def _fake_binary(tmp_path, script):
  path = tmp_path / 'worker_binary'
  path.write_text('#!/bin/sh\n' + script)
  path.chmod(0o755)
  return str(path)


def test_a_worker_that_exits_at_start_quotes_the_end_of_its_log(tmp_path, monkeypatch):
  lines = ''.join(f'echo "noise {i}"\n' for i in range(20))
  fake = _fake_binary(tmp_path, lines + 'echo "F: cannot load libfoo.so" >&2\nexit 3\n')
  monkeypatch.setattr(workers, 'worker_binary_path', lambda: fake)
  live = workers.live_pids()
  with pytest.raises(workers.WorkerStartError) as e:
    workers.WorkerProcess(log_dir=str(tmp_path / 'logs'))
  message = str(e.value)
  assert 'exited with code 3 at start' in message and '\n' not in message
  assert message.endswith('noise 17 | noise 18 | noise 19 | F: cannot load libfoo.so')
  assert 'noise 16' not in message and str(tmp_path / 'logs') in message
  assert workers.live_pids() == live


def test_a_port_whose_closed_connections_wait_is_not_in_use():
  """A server that was stopped leaves its connections in TIME_WAIT; gRPC and the TLS front bind
  over them (SO_REUSEADDR), so the check must not call the port taken (a worker restarted on
  its port, as tests/runtime/test_pool_hosts does)."""
  import socket
  server = socket.socket()
  server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  server.bind(('127.0.0.1', 0))
  server.listen()
  port = server.getsockname()[1]
  client = socket.create_connection(('127.0.0.1', port))
  conn, _ = server.accept()
  conn.close()          # the server closes first: its side of the connection waits (TIME_WAIT)
  client.close()
  server.close()
  assert not workers.port_in_use(port)


def test_a_port_taken_after_the_check_is_read_from_the_log(tmp_path, monkeypatch):
  noise = 'x' * 300   # gRPC's line is long: the cause is past what the error quotes of it
  fake = _fake_binary(tmp_path, f'echo "E chttp2_server.cc] {noise} UNKNOWN:Address already in '
                             'use"\necho "E servers.cc:67] failed to start"\n')
  monkeypatch.setattr(workers, 'worker_binary_path', lambda: fake)
  with pytest.raises(workers.PortInUseError, match='choose a free port with --port'):
    workers.WorkerProcess(log_dir=str(tmp_path))


def test_log_tail_cuts_long_lines_and_reads_a_missing_log_as_empty(tmp_path):
  log = tmp_path / 'w.log'
  log.write_text('a\n\n' + 'x' * 500 + '\nlast\n')
  assert workers.log_tail(str(log), lines=2, width=10) == 'xxxxxxx... | last'
  assert workers.log_tail(str(tmp_path / 'none.log')) == ''


def test_the_local_pool_picks_another_port_when_one_is_taken(monkeypatch):
  from tff_meta.runtime import pool  # pylint: disable=g-import-not-at-top
  with _listening_socket() as s:
    taken = s.getsockname()[1]
    picks = iter([taken, taken])
    real = workers.portpicker.pick_unused_port
    monkeypatch.setattr(workers.portpicker, 'pick_unused_port', lambda: next(picks, None) or real())
    with pool.WorkerPool.local(1) as p:
      assert p.addresses[0] != f'localhost:{taken}'
    with pytest.raises(workers.PortInUseError, match='--local_worker_port'):
      pool.WorkerPool.local(1, first_port=taken)


@pytest.mark.slow
def test_closing_a_worker_prints_no_grpc_traceback():
  """Issue 68: gRPC's connectivity poller raised 'Cannot monitor channel state: Channel
  closed!' with a traceback when a channel closed under it (intermittent: 5 runs)."""
  code = textwrap.dedent('''
      import faulthandler, sys
      faulthandler.dump_traceback_later(240, exit=True)   # a hang shows its threads' stacks
      from tff_meta.runtime import pool, workers
      for _ in range(3):
        p = pool.WorkerPool.local(1)
        p.close()
      w = workers.WorkerProcess()
      w.process.kill()
      w.process.wait()
      w.stop()
      print('ok', flush=True)
  ''')
  for _ in range(5):
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == 'ok', proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr and 'Channel closed' not in proc.stderr, proc.stderr
