"""Prints, as JSON, the flag names each program module defines: `python -m tests.program_flags
programs.train,programs.report` (null for a name that is no importable module).

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
  for module in modules:
    try:   # the module's code runs (defining its flags), not its main
      runpy.run_module(module, run_name='program_flags')
    except ImportError:
      out[module] = None
      continue
    names = set(flags.FLAGS)
    out[module] = sorted(names)
    for name in names - before:
      delattr(flags.FLAGS, name)
  return out


if __name__ == '__main__':
  print(json.dumps(program_flags([m for m in sys.argv[1].split(',') if m])))
