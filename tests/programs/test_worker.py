"""programs.worker, and the local pool programs.train starts, when a worker cannot start.

Issue 68: a port in use ended with "exited with code 0; see <log>" (the cause
only in the log), and on some runs a gRPC thread then printed a traceback
("ValueError: Cannot monitor channel state: Channel closed!"). Each case runs
several times, since that traceback came on some runs only: one `error:` line
naming the port and the flag, exit 1, no traceback.
"""

import socket
import subprocess
import sys
import textwrap

import portpicker
import pytest

from tests.conftest import REPO
from tests.helpers import program_env
from tests.programs.program_client import assert_clean_error

pytestmark = pytest.mark.slow   # runs programs as subprocesses

RUNS = 3


@pytest.fixture
def taken_port():
  """A port another program listens on (IPv6 and IPv4, as the worker would bind it)."""
  with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(('::', 0))
    s.listen()
    yield s.getsockname()[1]


def _run(*args):
  return subprocess.run([sys.executable, *args], cwd=REPO, env=program_env(),
                        capture_output=True, text=True, timeout=600)


def test_worker_port_in_use(taken_port):
  for _ in range(RUNS):
    proc = _run('-m', 'programs.worker', f'--port={taken_port}')
    assert proc.returncode == 1
    assert_clean_error(proc, f'port {taken_port} is already in use (another program listens on '
                       'it), so the TFF worker cannot serve there; choose a free port with '
                       '--port.')


def test_local_pool_port_in_use(taken_port, tmp_path):
  for i in range(RUNS):
    out = tmp_path / f'run{i}'
    proc = _run('-m', 'programs.train', '--config=configs/demo/digits.toml', '--rounds=1',
                '--progress=false', f'--local_worker_port={taken_port}', f'--output_dir={out}')
    assert proc.returncode == 1
    assert_clean_error(proc, f'port {taken_port} is already in use')
    assert '--local_worker_port' in proc.stderr and not out.exists()


def test_worker_that_exits_at_start_shows_the_end_of_its_log(tmp_path):
  fake = tmp_path / 'worker_binary'
  fake.write_text('#!/bin/sh\necho "starting"\necho "F: failed to load libtensorflow_framework.so" '
                  '>&2\nexit 2\n')
  fake.chmod(0o755)
  # programs.worker as `python -m` runs it, with TFF's binary replaced by one that fails.
  code = textwrap.dedent(f'''
      import runpy
      from tff_meta.runtime import workers
      workers.worker_binary_path = lambda: {str(fake)!r}
      runpy.run_module('programs.worker', run_name='__main__')
  ''')
  for _ in range(RUNS):
    proc = _run('-c', code, f'--port={portpicker.pick_unused_port()}', f'--log_dir={tmp_path}')
    assert proc.returncode == 1
    line = assert_clean_error(proc, 'exited with code 2 at start; the end of its log')
    assert line.endswith('starting | F: failed to load libtensorflow_framework.so')
