"""A TFF worker runs as nice as the program that starts it, also across Linux autogroups.

Linux kernels with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled` = 1, the
default of most desktop and server distributions) first share the CPU between sessions, and a
process's nice value only ranks it inside its own session. `WorkerProcess` starts each worker
binary in a new session (so that it can be stopped as a process group), which gives the worker a
new autogroup at nice 0: under `nice -n 10 python -m programs.train ...` the worker, which does
almost all of the work, would still take a full share of the CPU from every other session.

`preexec_for_worker()` (called in the parent) reads how nice the program is, by its own nice
value and by its autogroup's, and returns a function for `subprocess.Popen(preexec_fn=...)` that
gives the child's new autogroup that value. Raising an autogroup's nice value needs no privilege
(lowering it does, and is never attempted). Where the kernel has no autogroups, nothing changes.
"""

import os
from typing import Callable, Optional

_SELF = '/proc/self/autogroup'


def autogroup_nice(path: str = _SELF) -> Optional[int]:
  """The nice value of the autogroup in `path` ('/autogroup-123 nice 5'), or None if absent."""
  try:
    with open(path) as f:
      fields = f.read().split()
  except OSError:
    return None
  try:
    return int(fields[fields.index('nice') + 1])
  except (ValueError, IndexError):
    return None


def program_nice() -> int:
  """How nice this program runs: the larger of its own nice value and its autogroup's."""
  return max(os.getpriority(os.PRIO_PROCESS, 0), autogroup_nice() or 0)


def nice_under(increment: int) -> int:
  """`program_nice()` of a child started as `nice -n <increment>`: its own nice value is this
  program's plus `increment`, capped at 19 as the kernel caps it, and it shares this
  program's autogroup until it starts a session of its own."""
  own = min(os.getpriority(os.PRIO_PROCESS, 0) + int(increment), 19)
  return max(own, autogroup_nice() or 0)


def set_autogroup_nice(value: int, path: str = _SELF) -> bool:
  """Writes `value` (> 0) as the autogroup's nice value; False where it cannot be set."""
  if value <= 0:
    return False
  try:
    with open(path, 'w') as f:
      f.write(str(value))
    return True
  except OSError:
    return False


def preexec_for_worker(*also: Callable[[], None]) -> Callable[[], None]:
  """A `preexec_fn` that runs `also`, then gives the new session this program's niceness.

  Used with `start_new_session=True`: the child has its own autogroup by then.
  """
  value = program_nice()

  def preexec() -> None:
    for fn in also:
      fn()
    set_autogroup_nice(value)

  return preexec
