"""Reading cost: the first-party files (and their lines) a reader opens from an entry point.

  python .ci/reading_cost.py                     # the counts docs/ARCHITECTURE.md gives
  python .ci/reading_cost.py MODULE [--within PKG,PKG]

From the entry module it follows every import of the repository's own modules (those inside
functions too), transitively, and counts the files and their lines. `--within` keeps to the
named packages (e.g. `tff_meta.algorithms,tff_meta.learning`: the rooms an algorithm's reader
needs, without the registry and field plumbing of `core`). A package's `__init__.py` counts
when a name it defines is imported (`from tff_meta.algorithms import ALGORITHMS`), not when a
module is imported from the package (`from tff_meta.algorithms import process`). No TensorFlow: it reads the sources.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
FIRST_PARTY = ('tff_meta', 'programs')

_TRAIN = ('programs.train', 'tff_meta.program.tasks',
          'tff_meta.program.commands.classification_train')
# (label, entry modules, packages or modules kept; None = every first-party module)
COUNTS = (
    ('FedMeta(MAML): its module, the round and the inner loop', ('tff_meta.algorithms.fedmeta',),
     ('tff_meta.algorithms', 'tff_meta.learning')),
    ('FedMeta(MAML), every module it imports', ('tff_meta.algorithms.fedmeta',), None),
    ('a classification training run: programs/train, the task, the loop, the run folder',
     _TRAIN, _TRAIN + ('tff_meta.classification', 'tff_meta.core.loop', 'tff_meta.core.run_folder',
                       'tff_meta.program.executor', 'tff_meta.runtime.execution_plan',
                       'tff_meta.runtime.rounds')),
    ('a training run, every module it imports', ('programs.train',), None),
)


def _path(module: str) -> Optional[Path]:
  base = REPO.joinpath(*module.split('.'))
  for p in (base.with_suffix('.py'), base / '__init__.py'):
    if p.is_file():
      return p
  return None


def _imports(path: Path, module: str) -> Iterable[str]:
  package = module if path.name == '__init__.py' else module.rpartition('.')[0]
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        base = '.'.join(package.split('.')[:len(package.split('.')) - node.level + 1] +
                        ([base] if base else []))
      for a in node.names:   # a module by name, else a name the package itself defines
        yield f'{base}.{a.name}' if _path(f'{base}.{a.name}') else base


def closure(entries: Tuple[str, ...], within: Optional[Tuple[str, ...]] = None) -> Dict[str, int]:
  """Module -> lines, for `entries` and every first-party module they reach (kept to
  `within`)."""
  keep = lambda m: within is None or any(m == w or m.startswith(w + '.') for w in within)
  seen: Dict[str, int] = {}
  todo = list(entries)
  while todo:
    module = todo.pop()
    path = _path(module)
    if module in seen or path is None or not module.startswith(FIRST_PARTY) or not keep(module):
      continue
    seen[module] = len(path.read_text().splitlines())
    todo.extend(_imports(path, module))
  return seen


def main(argv) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('module', nargs='?')
  parser.add_argument('--within', default='')
  parser.add_argument('--list', action='store_true', help='print the files too')
  args = parser.parse_args(argv)
  counts = COUNTS if args.module is None else (
      (args.module, (args.module,), tuple(args.within.split(',')) if args.within else None),)
  for label, entries, within in counts:
    found = closure(entries, within)
    print(f'{label}: {len(found)} files, {sum(found.values()):,} lines')
    if args.list:
      for module, lines in sorted(found.items()):
        print(f'  {lines:5d}  {module}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
