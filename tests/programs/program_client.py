"""The test side of `program_runner`: run programs through it, and check how they fail.

`Runner` sends a program run to a `program_runner` server (TensorFlow imported
once, a forked `python -m programs.X` per request); `assert_clean_error`
checks that a program stopped on bad input with one `error:` line and left
the files it was given unchanged (`snapshot`).
"""

import json
import os
import subprocess
import sys

from tests.conftest import REPO
from tests.helpers import program_env
from tff_meta.core.files import LOCK_FILE


class Runner:
  """A `program_runner` server: run(module, *args) -> (returncode, stdout, stderr)."""

  def __init__(self):
    self._proc = subprocess.Popen(
        [sys.executable, '-m', 'tests.programs.program_runner'], cwd=REPO, env=program_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

  def run(self, module, *args, env=None):
    request = {'module': module, 'args': [str(a) for a in args], 'cwd': REPO, 'env': env or {}}
    self._proc.stdin.write(json.dumps(request) + '\n')
    self._proc.stdin.flush()
    reply = json.loads(self._proc.stdout.readline())
    return subprocess.CompletedProcess(args, reply['returncode'], reply['stdout'], reply['stderr'])

  def close(self):
    self._proc.stdin.close()
    self._proc.wait(timeout=60)


def snapshot(*roots):
  """path -> bytes of every file under `roots` (a file root is itself), less the run
  folders' `.lock` files (a run's PID, rewritten by each program that claims the folder)."""
  files = {}
  for root in map(str, roots):
    if os.path.isfile(root):
      files[root] = open(root, 'rb').read()
    for folder, _, names in os.walk(root):
      for name in names:
        if name == LOCK_FILE:
          continue
        path = os.path.join(folder, name)
        with open(path, 'rb') as f:
          files[path] = f.read()
  return files


def assert_clean_error(proc, expect=None, before=None):
  """Non-zero exit, one `error:` line (containing `expect`), no traceback, files unchanged."""
  assert proc.returncode != 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  assert 'Traceback' not in proc.stderr, proc.stderr[-4000:]
  errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert len(errors) == 1, proc.stderr[-3000:]
  assert 'internal error' not in errors[0], errors[0]
  if expect is not None:
    assert expect in errors[0], errors[0]
  if before is not None:
    now = snapshot(*{os.path.dirname(p) if os.path.isfile(p) else p for p in before})
    for path, content in before.items():
      assert now.get(path) == content, f'{path} changed or vanished'
  return errors[0]
