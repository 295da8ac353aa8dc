"""Prints, as JSON, the flag names each program module defines: `python -m tests.program_flags
programs.train,programs.report` (null for a name that is no importable module).
`programs.train@configs/x.toml` names the flags of that program for that config's task only
(a task's command defines its own flags: few-round takes --data_path, classification
--cache_dir).

The programs' modules run one at a time (not their main) in this process, and each one's flags are removed
before the next, since absl refuses to define a flag twice; tests/test_results_page.py runs it
in a process of its own, so that no test process holds the programs' flags.
"""

import json
import runpy
import sys
from typing import Dict, List, Optional, Sequence

from absl import flags


def program_flags(modules: Sequence[str]) -> Dict[str, Optional[List[str]]]:
  before = set(flags.FLAGS)
  out: Dict[str, Optional[List[str]]] = {}
  for entry in modules:
    module, _, config = entry.partition('@')
    try:   # the module's code runs (defining its flags), not its main
      code = runpy.run_module(module, run_name='program_flags')
    except ImportError:
      out[module] = None
      continue
    names = set(flags.FLAGS)
    for name in names - before:
      delattr(flags.FLAGS, name)
    if 'PROGRAM' in code:   # a program whose flags are its config's task's (program/tasks.py)
      names |= _task_flags(code['PROGRAM'], before, config)
    out[entry] = sorted(names)
  return out


def _task_flags(program: str, before, config: str = '') -> set:
  """The flags `config`'s task's command for `program` defines; without a config, the union
  over every task's command."""
  from tff_meta.program import tasks  # pylint: disable=g-import-not-at-top
  names = set()
  for task in [tasks.task_of_file(config)] if config else tasks.TASKS:
    if program in task.commands:
      task.command(program).define_flags()
      defined = set(flags.FLAGS)
      names |= defined
      for flag in defined - before:
        delattr(flags.FLAGS, flag)
  return names


if __name__ == '__main__':
  print(json.dumps(program_flags([m for m in sys.argv[1].split(',') if m])))
