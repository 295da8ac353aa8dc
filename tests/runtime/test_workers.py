"""Project-owned TFF workers are stopped by PID."""

import os
import signal
import subprocess
import sys
import textwrap
import time

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
  nice = priority.program_nice() + 3
  parent = subprocess.Popen(['nice', '-n', str(nice), sys.executable, '-c', script],
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
