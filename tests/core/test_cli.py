"""How a program ends when a helper thread raises (tff_meta/core/cli.py, issue 68).

The error reaches the main thread and is reported once, as one `error:` line,
with no traceback; gRPC's closed-channel noise from its poller thread is no error.
"""

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO
from tests.helpers import program_env

PROGRAM = textwrap.dedent('''
    import sys, threading, time
    from tff_meta.core import cli

    class BadInput(ValueError):
      pass

    def main(argv):
      del argv
      kind = sys.stdin.readline().strip()
      errors = {'user': BadInput('client 7: example 2 has nan; fix the file'),
                'bug': KeyError('k'),
                'grpc': ValueError('Cannot monitor channel state: Channel closed!')}
      def work():
        raise errors[kind]
      threading.Thread(target=work, name='helper').start()
      for _ in range(200):   # the main thread goes on with its work
        time.sleep(0.05)
      print('main finished', flush=True)

    cli.run(main, (BadInput,))
''')


def _run(kind, tmp_path):
  return subprocess.run([sys.executable, '-c', PROGRAM], input=kind + '\n', cwd=REPO,
                        env=dict(program_env(), TMPDIR=str(tmp_path)), capture_output=True,
                        text=True, timeout=120)


@pytest.mark.parametrize('kind, code, expect', [
    ('user', 1, 'error: client 7: example 2 has nan; fix the file'),
    ('bug', 70, "error: internal error (KeyError: 'k')")])
def test_an_error_in_a_helper_thread_ends_the_program_with_one_line(tmp_path, kind, code, expect):
  for _ in range(3):
    proc = _run(kind, tmp_path)
    assert proc.returncode == code, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
    assert len(errors) == 1 and errors[0].startswith(expect), proc.stderr
    assert 'Traceback' not in proc.stderr and 'main finished' not in proc.stdout


def test_grpc_closed_channel_noise_is_dropped(tmp_path):
  proc = _run('grpc', tmp_path)
  assert proc.returncode == 0 and 'main finished' in proc.stdout, proc.stderr
  assert 'Traceback' not in proc.stderr and 'error:' not in proc.stderr
