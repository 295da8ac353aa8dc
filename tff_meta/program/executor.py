"""Program flags that choose where rounds run, and the pool they build.

  --executor=local  [--local_workers=N]       N project-owned local workers (default 1)
  --executor=workers --workers=h1:p1,h2:p2    running TFF workers (programs/worker.py)
"""

from __future__ import annotations

from tff_meta.runtime.pool import WorkerPool, parse_addresses

EXECUTORS = ('local', 'workers')


def define_flags(flags_module) -> None:
  flags_module.DEFINE_enum('executor', 'local', list(EXECUTORS),
                           'local: start TFF C++ workers here; workers: use --workers.')
  flags_module.DEFINE_integer('local_workers', 1, 'With --executor=local: how many local '
                              'workers; >1 splits each round\'s clients across them.')
  flags_module.DEFINE_string('workers', None, 'With --executor=workers: comma-separated '
                             'host:port of running TFF workers (python -m programs.worker).')


def make_pool(flag_values, log_dir=None) -> WorkerPool:
  """The pool the flags ask for; close it (or use `with`) to stop owned workers."""
  if flag_values.executor == 'workers':
    if not flag_values.workers:
      raise ValueError('--executor=workers needs --workers=host:port[,host:port...].')
    return WorkerPool(parse_addresses(flag_values.workers))
  if flag_values.workers:
    raise ValueError('--workers is only used with --executor=workers.')
  if flag_values.local_workers < 1:
    raise ValueError(f'--local_workers must be >= 1, got {flag_values.local_workers}.')
  return WorkerPool.local(flag_values.local_workers, log_dir=log_dir)
