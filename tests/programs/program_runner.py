"""Runs `python -m programs.X ...` many times without paying TensorFlow's import each time.

The bad-input tests start dozens of programs that should stop within a
second of starting; a fresh interpreter spends most of its time importing
TensorFlow and TFF. This server imports them once, then for each request
forks a child that runs the program exactly as `python -m` does
(`runpy.run_module(..., run_name='__main__')`, its own argv, cwd and
stdout/stderr files) and reports the child's exit code and output.

Protocol (one JSON object per line): request {"module", "args", "cwd", "env",
"timeout"} on stdin (a child still running after `timeout` seconds is killed); reply {"returncode", "stdout", "stderr"} on stdout.
"""

import json
import os
import signal
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import tensorflow  # noqa: E402,F401  pylint: disable=unused-import
import tensorflow_federated  # noqa: E402,F401  pylint: disable=unused-import


def _child(request, out_path, err_path):
  import runpy  # pylint: disable=g-import-not-at-top
  code = 1
  try:
    for fd, path in ((1, out_path), (2, err_path)):
      f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
      os.dup2(f, fd)
      os.close(f)
    os.chdir(request['cwd'])
    os.environ.update(request.get('env', {}))
    sys.argv = [request['module'], *request['args']]
    runpy.run_module(request['module'], run_name='__main__', alter_sys=True)
    code = 0
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if e.code is not None and not isinstance(e.code, int):
      print(e.code, file=sys.stderr)
  except BaseException:  # pylint: disable=broad-except  # shown as a real program would
    import traceback  # pylint: disable=g-import-not-at-top
    traceback.print_exc()
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main():
  # The programs run here never use the network: a TFF file they would download is as if
  # offline (an OSError, which the data layer reports as a failed download).
  from tensorflow_federated.python.simulation.datasets import download  # pylint: disable=g-import-not-at-top
  from tests import offline  # pylint: disable=g-import-not-at-top
  download.get_compressed_file = offline.tff_downloads_refused(download.get_compressed_file,
                                                               OSError)
  for line in sys.stdin:
    request = json.loads(line)
    with tempfile.TemporaryDirectory() as tmp:
      out_path, err_path = os.path.join(tmp, 'out'), os.path.join(tmp, 'err')
      pid = os.fork()
      if pid == 0:
        _child(request, out_path, err_path)
      deadline = time.monotonic() + request.get('timeout', 600)
      while True:   # a hung program fails its test instead of hanging the suite
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
          break
        if time.monotonic() > deadline:
          os.kill(pid, signal.SIGKILL)   # its TFF worker dies with it (PR_SET_PDEATHSIG)
          _, status = os.waitpid(pid, 0)
          break
        time.sleep(0.05)
      with open(out_path, errors='replace') as f:
        stdout = f.read()
      with open(err_path, errors='replace') as f:
        stderr = f.read()
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps({'returncode': code, 'stdout': stdout, 'stderr': stderr}), flush=True)


if __name__ == '__main__':
  main()
