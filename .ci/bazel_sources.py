"""What .ci/gen_bazel.py reads from the Python sources: modules, their imports, their labels.

Everything here is computed from the .py files and requirements.txt alone; no BUILD file is
read and nothing is imported (no TensorFlow)."""
from __future__ import annotations

import ast
import dataclasses
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterable, List, Optional

PY_ROOTS = ('tff_meta', 'programs', 'research', 'benchmarks', 'tests')
SKIP_DIRS = {'__pycache__', '.git', '.venv', '.pytest_cache'}
REQUIREMENTS = 'requirements.txt'

# Top-level import name -> pip distribution name, where they differ.
IMPORT_TO_PIP = {
    'absl': 'absl-py',
    'grpc': 'grpcio',
    'sklearn': 'scikit-learn',
    'surprise': 'scikit-surprise',
    'tensorflow_datasets': 'tensorflow-datasets',
    'tensorflow_federated': 'tensorflow-federated',
    'tensorflow_privacy': 'tensorflow-privacy',
    'tensorflow_probability': 'tensorflow-probability',
    'PIL': 'pillow',
}

# Modules loaded dynamically in a way the generator cannot see, as
# {module path: [dotted module names it loads]}. Lazy loaders of the form
# importlib.import_module(f'pkg.{name}') are found on their own (every string
# constant in the module naming a submodule of pkg counts).
DYNAMIC_IMPORTS: Dict[str, List[str]] = {}

# Files whose string constants are synthetic sources, not code they run: they are
# not scanned for subprocess imports or configs/ paths.
STRING_SCAN_EXEMPT = {'tests/test_bazel_consistency.py', 'tests/test_reading_cost.py'}


def normalize_dist(name: str) -> str:
  """PEP 503 name normalization: Scikit_Learn -> scikit-learn."""
  return re.sub(r'[-_.]+', '-', name).lower()


def requirement_label(dist: str) -> str:
  """The label rules_python's `requirement(dist)` stands for, in @pypi."""
  return f'@pypi//{normalize_dist(dist)}'


def read_requirements(repo: Path) -> Dict[str, str]:
  """normalized name -> name as written, from the pinned lock."""
  pins = {}
  for line in (repo / REQUIREMENTS).read_text().splitlines():
    line = line.split('#', 1)[0].strip()
    if line and not line.startswith('-'):
      name = re.split(r'[<>=!~;\[ ]', line, 1)[0]
      pins[normalize_dist(name)] = name
  return pins


def find_modules(repo: Path) -> List[str]:
  """Relative paths of every .py file under the first-party roots."""
  modules = []
  for root in PY_ROOTS:
    for dirpath, dirnames, filenames in os.walk(repo / root):
      dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
      modules += [(Path(dirpath) / f).relative_to(repo).as_posix()
                  for f in sorted(filenames) if f.endswith('.py')]
  return modules


def _has_main(path: Path) -> bool:
  tree = ast.parse(path.read_text())
  return any(isinstance(n, ast.FunctionDef) and n.name == 'main' for n in tree.body)


def trivial(path: Path) -> bool:
  """Only a docstring and constant assignments (`__version__ = ...`): Bazel's empty
  stand-in for a missing __init__.py behaves the same."""
  for node in ast.parse(path.read_text()).body:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
      continue
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
      continue
    return False
  return True


def expected_rule(repo: Path, path: str):
  """(kind, name) a module is declared as: a package's __init__.py is the py_library named
  after the package, tests/**/test_*.py a py_test, a program with a main a py_binary."""
  p = Path(path)
  if p.name == '__init__.py':
    return 'py_library', p.parent.name
  if p.parts[0] == 'tests' and p.name.startswith('test_'):
    return 'py_test', p.stem
  if p.parts[0] == 'programs' and _has_main(repo / path):
    return 'py_binary', p.stem
  return 'py_library', p.stem


def expected_label(repo: Path, path: str) -> str:
  return f'//{Path(path).parent.as_posix()}:{expected_rule(repo, path)[1]}'


def sort_key(value: str):
  """buildifier's order for label lists: plain files, ':local', '//abs', '@external'."""
  phase = (1 if value.startswith(':') else 2 if value.startswith('//') else
           3 if value.startswith('@') else 0)
  return phase, value.replace(':', '.').split('.'), value


def display(label: str, package: str) -> str:
  """How the canonical `label` is written in `package`'s BUILD file."""
  if label.startswith('@pypi//'):
    return f'requirement("{label[len("@pypi//"):]}")'
  pkg, _, name = label[2:].partition(':')
  if pkg == package:
    return f'":{name}"'
  if pkg.rsplit('/', 1)[-1] == name:
    return f'"//{pkg}"'
  return f'"{label}"'


@dataclasses.dataclass
class Imports:
  """What one module needs: first-party module paths and third-party top-level names."""
  internal: Dict[str, str] = dataclasses.field(default_factory=dict)  # path -> how
  runtime: Dict[str, str] = dataclasses.field(default_factory=dict)  # run in a subprocess
  third_party: Dict[str, str] = dataclasses.field(default_factory=dict)  # name -> how
  problems: List[str] = dataclasses.field(default_factory=list)


def _module_file(repo: Path, dotted: str) -> Optional[str]:
  base = repo.joinpath(*dotted.split('.'))
  for candidate in (base.with_suffix('.py'), base / '__init__.py'):
    if candidate.is_file():
      return candidate.relative_to(repo).as_posix()
  return None


def string_value(node: ast.AST) -> Optional[str]:
  """A str constant, or an f-string with each placeholder replaced by `_x_`."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value
  if isinstance(node, ast.JoinedStr):
    return ''.join(v.value if isinstance(v, ast.Constant) else '_x_' for v in node.values)
  return None


def names_fixtures(nodes: List[ast.AST]) -> bool:
  """True when the module (its `nodes`) uses the FIXTURES constant of tests/conftest.py."""
  return any(isinstance(n, ast.Name) and n.id == 'FIXTURES' for n in nodes)


def names_configs(nodes: List[ast.AST]) -> bool:
  """True when a string constant of the module names a path under configs/."""
  return any('configs/' in (string_value(n) or '') for n in nodes)


_CODE_IMPORT = re.compile(r'(?m)^\s*(from|import)\s+(%s)\b' % '|'.join(PY_ROOTS))
_MODULE_NAME = re.compile(r'^(%s)(\.\w+)+$' % '|'.join(PY_ROOTS))


def _is_import_call(n: ast.AST) -> bool:
  return (isinstance(n, ast.Call) and bool(n.args) and
          ((isinstance(n.func, ast.Attribute) and n.func.attr == 'import_module') or
           (isinstance(n.func, ast.Name) and n.func.id in ('import_module', '__import__'))))


def module_imports(repo: Path, path: str, nodes: List[ast.AST]) -> Imports:
  """Static, lazy, dynamic and subprocess imports of the module at `path`, whose syntax
  tree is `nodes` (list(ast.walk(tree)))."""
  out = Imports()
  package = Path(path).parent.parts  # what `from . import x` is relative to

  def add_internal(dotted: str, names: Iterable[str], how: str, into: Dict[str, str]):
    for name in names:
      if name != '*':
        sub = _module_file(repo, f'{dotted}.{name}')
        if sub:  # `from pkg import submodule`
          into.setdefault(sub, how)
          continue
      found = _module_file(repo, dotted)  # a symbol of pkg/__init__.py or of module pkg
      if found:
        into.setdefault(found, how)
      else:
        out.problems.append(f'{path}: `{how}` names {dotted}, which is no module in this repo')

  def visit_imports(nodes: List[ast.AST], into: Dict[str, str], third_party: bool):
    for n in nodes:
      if isinstance(n, ast.Import):
        for alias in n.names:
          top = alias.name.split('.')[0]
          if top in PY_ROOTS:
            dotted, _, last = alias.name.rpartition('.')
            add_internal(dotted or alias.name, [last if dotted else '*'],
                         f'import {alias.name}', into)
          elif third_party:
            out.third_party.setdefault(top, f'import {alias.name}')
      elif isinstance(n, ast.ImportFrom):
        if n.level:
          base = package[:len(package) - n.level + 1]
          dotted = '.'.join(base + ((n.module,) if n.module else ()))
        else:
          dotted = n.module
        top = dotted.split('.')[0]
        names = [a.name for a in n.names]
        how = f'from {"." * n.level}{n.module or ""} import {", ".join(names)}'
        if top in PY_ROOTS:
          add_internal(dotted, names, how, into)
        elif third_party and top != '__future__':
          out.third_party.setdefault(top, how)

  visit_imports(nodes, out.internal, third_party=True)

  constants = {s for s in map(string_value, nodes) if s is not None}
  for n in nodes:  # importlib.import_module(...) / __import__(...)
    if not _is_import_call(n):
      continue
    arg = n.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value[:1] != '.':
      top = arg.value.split('.')[0]
      if top in PY_ROOTS:
        add_internal(arg.value, ['*'], f'import_module({arg.value!r})', out.internal)
      else:
        out.third_party.setdefault(top, f'import_module({arg.value!r})')
      continue
    prefix = (arg.values[0].value if isinstance(arg, ast.JoinedStr) and arg.values and
              isinstance(arg.values[0], ast.Constant) else '')
    if prefix.endswith('.') and prefix.split('.')[0] in PY_ROOTS:
      pkg_dir = repo.joinpath(*prefix[:-1].split('.'))
      subs = sorted(c for c in constants
                    if re.fullmatch(r'\w+', c) and (pkg_dir / f'{c}.py').is_file())
      for sub in subs:
        add_internal(prefix[:-1], [sub], f"import_module(f'{prefix}{{...}}') with {sub!r}",
                     out.internal)
      if subs:
        continue
    if path not in DYNAMIC_IMPORTS:
      out.problems.append(
          f'{path}:{n.lineno}: a dynamic import the generator cannot follow; list the modules '
          'it loads in DYNAMIC_IMPORTS in .ci/bazel_sources.py')
  for dotted in DYNAMIC_IMPORTS.get(path, []):
    add_internal(dotted, ['*'], 'DYNAMIC_IMPORTS', out.internal)

  # Modules run in a subprocess: `python -m programs.train`, `python -c "<code>"`.
  for s in (constants if path not in STRING_SCAN_EXEMPT else ()):
    if _MODULE_NAME.match(s) and _module_file(repo, s):
      add_internal(s, ['*'], f'runs {s!r}', out.runtime)
    elif _CODE_IMPORT.search(s):
      try:
        code = ast.parse(textwrap.dedent(s))
      except SyntaxError:
        continue
      visit_imports(list(ast.walk(code)), out.runtime, third_party=False)
  for p in list(out.runtime):
    if p in out.internal:
      del out.runtime[p]
  return out


def stdlib_names():
  return set(sys.stdlib_module_names)
