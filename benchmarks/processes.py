"""Processes the benchmarks watch from outside, read from /proc: a program's children, its
TFF worker, CPU seconds and peak memory, and `run_program`, which runs `programs.train` and
watches it and its worker. No TensorFlow of its own (`runtime.workers` imports TFF)."""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence

from tff_meta.runtime import workers


def children(pid: int) -> List[int]:
  """PIDs of the processes whose parent is `pid` (from /proc)."""
  found = []
  for entry in os.listdir('/proc'):
    if entry.isdigit():
      try:
        with open(f'/proc/{entry}/stat') as f:
          if int(f.read().rsplit(')', 1)[1].split()[1]) == pid:
            found.append(int(entry))
      except (OSError, ValueError, IndexError):
        pass
  return found


def is_worker(pid: int) -> bool:
  """Whether `pid` runs TFF's C++ `worker_binary`."""
  try:
    with open(f'/proc/{pid}/cmdline', 'rb') as f:
      return os.path.basename(f.read().split(b'\0')[0]) == b'worker_binary'
  except OSError:
    return False


def workers_of(pid: int) -> List[int]:
  """The TFF workers among `pid`'s children."""
  return [c for c in children(pid) if is_worker(c)]


def cpu_seconds(pid: int) -> float:
  """User + system CPU seconds of process `pid` so far (/proc/<pid>/stat); NaN if gone."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
  except (OSError, ValueError, IndexError):
    return float('nan')


def peak_rss_mb(pid: int) -> float:
  """VmHWM (peak resident set) of a process, in MiB; NaN if gone."""
  return workers.status_kib(pid, 'VmHWM') / 1024


def rss_mb(pid: int) -> float:
  """VmRSS (resident set) of a process, in MiB; NaN if gone."""
  return workers.status_kib(pid, 'VmRSS') / 1024


@dataclasses.dataclass
class ProgramRun:
  """What `run_program` read: peaks in MiB, the worker's CPU seconds, metrics.csv's rows."""
  program_peak_mb: float
  worker_peak_mb: float
  worker_cpu_s: float
  metrics: List[Dict[str, str]]


def run_program(config: str, rounds: int, output_dir: str, flags: Sequence[str] = (), *,
                cwd: str, env: Optional[Mapping[str, str]] = None,
                poll_s: float = 0.2) -> ProgramRun:
  """Runs `programs.train` on `config` for `rounds` rounds (evaluated at round 0 and at the
  last, as a run is) into `output_dir`, with more `flags`, from checkout `cwd`, with `env`
  added to the environment; its output goes to `output_dir`.log.

  Every `poll_s` seconds until it ends, reads the peak resident set (VmHWM) of the program
  and of its TFF workers and the workers' CPU seconds (the largest seen of each). Exits with
  one `error:` line naming the log when the program fails.
  """
  command = [sys.executable, '-m', 'programs.train', f'--config={config}', f'--rounds={rounds}',
             f'--eval_every={rounds}', '--progress=false', f'--output_dir={output_dir}', *flags]
  log_path = output_dir + '.log'
  program = worker = cpu = 0.0
  seen = lambda x, y: x if y != y else max(x, y)   # NaN: the process has ended
  with open(log_path, 'wb') as log:
    proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=log,
                            stderr=subprocess.STDOUT, cwd=cwd)
    while proc.poll() is None:
      program = seen(program, peak_rss_mb(proc.pid))
      for pid in workers_of(proc.pid):
        worker, cpu = seen(worker, peak_rss_mb(pid)), seen(cpu, cpu_seconds(pid))
      time.sleep(poll_s)
  if proc.returncode != 0:
    sys.exit(f'error: {" ".join(command)} exited with {proc.returncode}; see {log_path}.')
  with open(os.path.join(output_dir, 'metrics.csv'), newline='') as f:
    return ProgramRun(program, worker, cpu, list(csv.DictReader(f)))
