"""`tff-meta PROGRAM [flags]`: the console command an installed wheel gives.

`tff-meta train --config=demo` runs `programs.train` exactly as
`python -m programs.train --config=demo` does (the module run as `__main__`,
through `runpy`). The programs are the modules of the `programs` package that
run as a script, found when the command runs, so a new program needs no entry
here. `tff-meta` alone or `tff-meta --help` lists them with their first
docstring line; `tff-meta configs` lists the shipped configs that `--config`
takes by name (`config_file.resolve_config`). No TensorFlow is loaded before
the program itself.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import pkgutil
import runpy
import sys
from typing import Dict, List, Optional

COMMAND = 'tff-meta'


def programs() -> Dict[str, str]:
  """Program name -> the first line of its docstring, for each script module of `programs`."""
  import programs as package  # pylint: disable=g-import-not-at-top
  found = {}
  for info in pkgutil.iter_modules(package.__path__):
    if info.ispkg:
      continue
    origin = importlib.util.find_spec(f'{package.__name__}.{info.name}').origin
    with open(origin, encoding='utf-8') as f:
      tree = ast.parse(f.read())
    if any(isinstance(node, ast.If) and "__name__ == '__main__'" in ast.unparse(node.test)
           for node in tree.body):
      found[info.name] = (ast.get_docstring(tree) or '').strip().split('\n')[0]
  return dict(sorted(found.items()))


def usage(found: Dict[str, str]) -> str:
  width = max(map(len, found), default=0)
  lines = [f'usage: {COMMAND} PROGRAM [--flags]   (the same as python -m programs.PROGRAM)',
           f'       {COMMAND} PROGRAM --help       (the program\'s flags)',
           f'       {COMMAND} configs              (the configs --config=NAME takes)', '',
           'programs:']
  lines += [f'  {name.ljust(width)}  {summary}' for name, summary in found.items()]
  return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
  args = sys.argv[1:] if argv is None else list(argv)
  found = programs()
  if not args or args[0] in ('-h', '--help', 'help'):
    print(usage(found))
    return 0
  if args[0] == 'configs':
    from tff_meta.core import config_file  # pylint: disable=g-import-not-at-top
    print('\n'.join(config_file.shipped_configs()))
    return 0
  name = args[0].replace('-', '_')
  if name not in found:
    near = difflib.get_close_matches(name, found, n=3, cutoff=0.5)
    print(f'error: {COMMAND} has no program {args[0]!r}'
          + (f'; did you mean {" or ".join(near)}?' if near else '')
          + f' Programs: {", ".join(found)}.', file=sys.stderr)
    return 1
  sys.argv = [f'{COMMAND} {name}', *args[1:]]
  runpy.run_module(f'programs.{name}', run_name='__main__', alter_sys=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
