"""How a program ends when a helper thread raises (tff_meta/core/cli.py, issue 68).

The error reaches the main thread and is reported once, as one `error:` line,
with no traceback; gRPC's closed-channel noise from its poller thread is no error.
"""

import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO
from tests.helpers import program_env

PROGRAM = textwrap.dedent('''
    import ctypes, sys, threading, time
    from tff_meta.core import cli

    class BadInput(ValueError):
      pass

    def main(argv):
      del argv
      kind, where = sys.stdin.readline().split()
      errors = {'user': BadInput('client 7: example 2 has nan; fix the file'),
                'bug': KeyError('k'),
                'grpc': ValueError('Cannot monitor channel state: Channel closed!')}
      def work():
        time.sleep(0.5)   # after the main thread is where it is going
        raise errors[kind]
      threading.Thread(target=work, name='helper').start()
      if where == 'stuck':   # inside a C call that does not come back for 30 s
        cli.TERM_GRACE_S = 1.0
        ctypes.CDLL(None).sleep(30)
      cli.TERM_GRACE_S = 60.0   # past the loop below: only the main thread can report
      for _ in range(200):   # the main thread goes on with its work
        time.sleep(0.05)
      print('main finished', flush=True)

    cli.run(main, (BadInput,), lambda e: 4)
''')


def _run(kind, tmp_path, where='python', ignore_sigint=False):
  """The program above; `ignore_sigint` starts it as a shell's background job is started."""
  def ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
  return subprocess.run([sys.executable, '-c', PROGRAM], input=f'{kind} {where}\n', cwd=REPO,
                        env=dict(program_env(), TMPDIR=str(tmp_path)), capture_output=True,
                        text=True, timeout=120, preexec_fn=ignored if ignore_sigint else None)


@pytest.mark.parametrize('kind, code, expect', [
    ('user', 4, 'error: client 7: example 2 has nan; fix the file'),
    ('bug', 70, "error: internal error (KeyError: 'k')")])
@pytest.mark.parametrize('where, ignore_sigint', [
    ('python', False), ('python', True), ('stuck', False)],
    ids=['main-thread-in-python', 'sigint-ignored', 'main-thread-stuck-in-c'])
def test_an_error_in_a_helper_thread_ends_the_program_with_one_line(
    tmp_path, kind, code, expect, where, ignore_sigint):
  """The same line and exit code however the main thread is found: in Python code, started
  with SIGINT ignored (a background job), or inside a C call (the fallback after the grace)."""
  proc = _run(kind, tmp_path, where, ignore_sigint)
  assert proc.returncode == code, proc.stderr
  errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert len(errors) == 1 and errors[0].startswith(expect), proc.stderr
  assert 'Traceback' not in proc.stderr and 'main finished' not in proc.stdout


def test_grpc_closed_channel_noise_is_dropped(tmp_path):
  proc = _run('grpc', tmp_path)
  assert proc.returncode == 0 and 'main finished' in proc.stdout, proc.stderr
  assert 'Traceback' not in proc.stderr and 'error:' not in proc.stderr
