"""Processes the benchmarks watch from outside, read from /proc: a program's children, its
TFF worker, CPU seconds and peak memory. No TensorFlow (the subprocess runners import it)."""

from __future__ import annotations

import os
from typing import List


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
