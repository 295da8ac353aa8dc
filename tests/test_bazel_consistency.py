"""The Bazel declarations (WORKSPACE, BUILD files) agree with the Python sources.

Bazel cannot run here, so this test evaluates every BUILD file with stub rule
functions (BUILD files are Starlark, which for our purposes is Python syntax)
and checks the declared targets against the modules and their imports:

  (a) every .py file under tff_meta/, programs/ and tests/ is in the srcs of
      exactly one target, every package directory has a BUILD file, and each
      module has the expected kind and name: `py_test` for tests/**/test_*.py,
      `py_binary` for programs with a main, `py_library` otherwise; a package's
      __init__.py is a py_library named after the package
      (//tff_meta/algorithms:algorithms);
  (b) every src, data and dep label resolves (files exist, targets exist,
      cross-package files are exported);
  (c) every first-party import is covered by a dep on the target owning the
      imported module, or on the package's __init__ target when
      `from pkg import name` names a symbol, not a submodule. Lazy
      `importlib.import_module(f'pkg.{x}')` loaders and modules run in a
      subprocess (`-m programs.train`, `-c` scripts) count too; the latter
      may be covered by `data` instead of `deps`. Python runs every enclosing
      package's __init__.py before a module; Bazel puts an empty one in its
      place unless the real one is in the runfiles, so each py_binary and
      py_test must reach every non-empty enclosing __init__ (tff_meta/__init__.py
      registers an atexit hook, algorithms/__init__.py registers builders).
      Libraries cannot depend on their own package (its __init__ imports them:
      a cycle), so the entry points carry those deps;
  (d) every third-party import maps to a `requirement("...")` dep whose name
      is pinned in requirements.txt;
plus: no unused first-party deps, no dependency cycles, sorted and
duplicate-free lists, public default visibility, pytest-style py_tests that
really run pytest, and a WORKSPACE that parses requirements.txt for Python 3.11.

No TensorFlow or TFF import is needed. Run: python -m pytest -q tests/test_bazel_consistency.py
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

# The real checkout, also when Bazel runs this test from a runfiles tree of symlinks.
REPO = Path(os.path.realpath(__file__)).parent.parent

PY_ROOTS = ('tff_meta', 'programs', 'tests')
SKIP_DIRS = {'__pycache__', '.git', '.venv', '.pytest_cache'}

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

# Modules loaded dynamically in a way the checker cannot see, as
# {module path: [dotted module names it loads]}. Lazy loaders of the form
# importlib.import_module(f'pkg.{name}') are found on their own (every string
# constant in the module naming a submodule of pkg counts).
DYNAMIC_IMPORTS: Dict[str, List[str]] = {}

# This file's own string constants are synthetic sources for the checker's
# tests, not code it runs: they are not scanned for subprocess imports.
STRING_SCAN_EXEMPT = {'tests/test_bazel_consistency.py'}

# Every pytest-style py_test runs this generated runner (see tests/BUILD).
PYTEST_RUNNER = '//tests:pytest_runner.py'
CONFTEST_PATH = 'tests/conftest.py'
PYPROJECT = '//:pyproject.toml'
CONFIGS = '//:configs'
FIXTURE_FILES = '//tests/fixtures:files'
REQUIREMENTS = 'requirements.txt'

PY_RULES = ('py_library', 'py_binary', 'py_test')


def normalize_dist(name: str) -> str:
  """PEP 503 name normalization: Scikit_Learn -> scikit-learn."""
  return re.sub(r'[-_.]+', '-', name).lower()


def requirement_label(dist: str) -> str:
  """What the stub `requirement()` returns (rules_python returns a label in @pypi)."""
  return f'@pypi//{normalize_dist(dist)}'


# ----------------------------------------------------------------------------
# Evaluating BUILD files.


@dataclasses.dataclass
class Target:
  kind: str
  package: str  # '' for the root package
  build_file: str  # relative path, for messages
  attrs: dict

  @property
  def name(self) -> str:
    return self.attrs['name']

  @property
  def label(self) -> str:
    return f'//{self.package}:{self.name}'

  def attr_list(self, key: str) -> list:
    value = self.attrs.get(key, [])
    return list(value) if isinstance(value, (list, tuple)) else [value]


@dataclasses.dataclass
class Package:
  name: str
  build_file: str
  targets: Dict[str, Target]
  exported: Set[str]  # exports_files
  generated: Set[str]  # genrule outs
  default_visibility: Optional[list]


class BuildError(Exception):
  pass


def canonical(label: str, package: str) -> str:
  """':x', 'x', '//p:x', '//p' -> '//p:x'; external labels unchanged."""
  if label.startswith('@'):
    return label
  if label.startswith('//'):
    pkg, colon, name = label[2:].partition(':')
    if not colon:
      name = pkg.rsplit('/', 1)[-1]
    return f'//{pkg}:{name}'
  return f'//{package}:{label.lstrip(":")}'


def split_label(label: str) -> Tuple[str, str]:
  pkg, _, name = label[2:].partition(':')
  return pkg, name


def _glob(pkg_dir: Path, package_dirs: Set[Path]):
  """Bazel's glob: files under the package, not crossing into subpackages."""

  def glob(include, exclude=(), allow_empty=True):
    del allow_empty
    found = set()
    for pattern in include:
      for path in pkg_dir.glob(pattern):
        if not path.is_file():
          continue
        owner = next((p for p in path.parents if p in package_dirs), None)
        if owner == pkg_dir:
          found.add(path.relative_to(pkg_dir).as_posix())
    for pattern in exclude:
      found -= {p.relative_to(pkg_dir).as_posix() for p in pkg_dir.glob(pattern)}
    return sorted(found)

  return glob


def find_build_files(repo: Path) -> List[Path]:
  ignored = set(SKIP_DIRS)
  bazelignore = repo / '.bazelignore'
  if bazelignore.exists():
    ignored |= {l.strip().strip('/') for l in bazelignore.read_text().splitlines()
                if l.strip() and not l.startswith('#')}
  found = []
  for dirpath, dirnames, filenames in os.walk(repo):
    rel = Path(dirpath).relative_to(repo).as_posix()
    dirnames[:] = sorted(d for d in dirnames
                         if d not in SKIP_DIRS and not d.startswith('bazel-')
                         and (d if rel == '.' else f'{rel}/{d}') not in ignored)
    for name in ('BUILD', 'BUILD.bazel'):
      if name in filenames:
        found.append(Path(dirpath) / name)
  return found


def evaluate_build_files(repo: Path) -> Dict[str, Package]:
  """Evaluates every BUILD file under `repo` with stub rules; package name -> Package."""
  build_files = find_build_files(repo)
  package_dirs = {f.parent for f in build_files}
  packages: Dict[str, Package] = {}
  for build_file in build_files:
    name = build_file.parent.relative_to(repo).as_posix()
    name = '' if name == '.' else name
    rel_build = build_file.relative_to(repo).as_posix()
    pkg = Package(name, rel_build, {}, set(), set(), None)

    def rule(kind, pkg=pkg):

      def record(**attrs):
        if 'name' not in attrs:
          raise BuildError(f'{pkg.build_file}: a {kind} without a name')
        if attrs['name'] in pkg.targets:
          raise BuildError(f'{pkg.build_file}: two targets named {attrs["name"]!r}')
        pkg.targets[attrs['name']] = Target(kind, pkg.name, pkg.build_file, attrs)
        if kind == 'genrule':
          pkg.generated.update(attrs.get('outs', []))

      return record

    def package(default_visibility=None, pkg=pkg, **_):
      pkg.default_visibility = default_visibility

    def exports_files(srcs, pkg=pkg, **_):
      pkg.exported.update(srcs)

    scope = {
        '__builtins__': {'True': True, 'False': False, 'None': None, 'len': len,
                         'sorted': sorted, 'list': list, 'dict': dict, 'str': str},
        'load': lambda *args, **kwargs: None,
        'package': package,
        'exports_files': exports_files,
        'glob': _glob(build_file.parent, package_dirs),
        'requirement': requirement_label,
    }
    for kind in PY_RULES + ('genrule', 'filegroup'):
      scope[kind] = rule(kind)
    try:
      exec(compile(build_file.read_text(), rel_build, 'exec'), scope)  # pylint: disable=exec-used
    except NameError as e:
      raise BuildError(f'{rel_build}: {e}; teach tests/test_bazel_consistency.py the new rule') from e
    packages[name] = pkg
  return packages


def all_targets(packages: Dict[str, Package]) -> Dict[str, Target]:
  return {t.label: t for p in packages.values() for t in p.targets.values()}


# ----------------------------------------------------------------------------
# Reading the Python sources.


def find_modules(repo: Path) -> List[str]:
  """Relative paths of every .py file under the first-party roots."""
  modules = []
  for root in PY_ROOTS:
    for dirpath, dirnames, filenames in os.walk(repo / root):
      dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
      modules += [(Path(dirpath) / f).relative_to(repo).as_posix()
                  for f in sorted(filenames) if f.endswith('.py')]
  return modules


def expected_rule(repo: Path, path: str) -> Tuple[str, str]:
  """(kind, name) a module should be declared as."""
  p = Path(path)
  if p.name == '__init__.py':
    return 'py_library', p.parent.name
  if p.parts[0] == 'tests' and p.name.startswith('test_'):
    return 'py_test', p.stem
  if p.parts[0] == 'programs' and _has_main(repo / path):
    return 'py_binary', p.stem
  return 'py_library', p.stem


def _trivial(path: Path) -> bool:
  """Only a docstring and constant assignments (`__version__ = ...`)."""
  for node in ast.parse(path.read_text()).body:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
      continue
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
      continue
    return False
  return True


def _has_main(path: Path) -> bool:
  tree = ast.parse(path.read_text())
  return any(isinstance(n, ast.FunctionDef) and n.name == 'main' for n in tree.body)


def expected_label(repo: Path, path: str) -> str:
  return f'//{Path(path).parent.as_posix()}:{expected_rule(repo, path)[1]}'


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


def _string_value(node: ast.AST) -> Optional[str]:
  """A str constant, or an f-string with each placeholder replaced by `_x_`."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value
  if isinstance(node, ast.JoinedStr):
    return ''.join(v.value if isinstance(v, ast.Constant) else '_x_' for v in node.values)
  return None


def names_fixtures(source: str) -> bool:
  """True when Python `source` uses the FIXTURES constant of tests/conftest.py."""
  return any(isinstance(n, ast.Name) and n.id == 'FIXTURES' for n in ast.walk(ast.parse(source)))


_CODE_IMPORT = re.compile(r'(?m)^\s*(from|import)\s+(%s)\b' % '|'.join(PY_ROOTS))
_MODULE_NAME = re.compile(r'^(%s)(\.\w+)+$' % '|'.join(PY_ROOTS))


def module_imports(repo: Path, path: str) -> Imports:
  """Static, lazy, dynamic and subprocess imports of the module at `path`."""
  out = Imports()
  tree = ast.parse((repo / path).read_text(), path)
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

  def visit_imports(node: ast.AST, into: Dict[str, str], third_party: bool):
    for n in ast.walk(node):
      if isinstance(n, ast.Import):
        for alias in n.names:
          top = alias.name.split('.')[0]
          if top in PY_ROOTS:
            dotted, _, last = alias.name.rpartition('.')
            if dotted:
              add_internal(dotted, [last], f'import {alias.name}', into)
            else:
              add_internal(alias.name, ['*'], f'import {alias.name}', into)
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

  visit_imports(tree, out.internal, third_party=True)

  constants = {s for s in (_string_value(n) for n in ast.walk(tree)) if s is not None}
  for n in ast.walk(tree):
    # importlib.import_module(...) / __import__(...)
    if (isinstance(n, ast.Call) and n.args and
        ((isinstance(n.func, ast.Attribute) and n.func.attr == 'import_module') or
         (isinstance(n.func, ast.Name) and n.func.id in ('import_module', '__import__')))):
      arg = n.args[0]
      if (isinstance(arg, ast.Constant) and isinstance(arg.value, str)
          and not arg.value.startswith('.')):
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
        if subs or path in DYNAMIC_IMPORTS:
          continue
      if path not in DYNAMIC_IMPORTS:
        out.problems.append(
            f'{path}:{n.lineno}: a dynamic import the checker cannot follow; list the modules '
            f'it loads in DYNAMIC_IMPORTS in tests/test_bazel_consistency.py')
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
      visit_imports(code, out.runtime, third_party=False)
  for p in list(out.runtime):
    if p in out.internal:
      del out.runtime[p]
  return out


def stdlib_names() -> Set[str]:
  return set(sys.stdlib_module_names)


def read_requirements(repo: Path) -> Dict[str, str]:
  """normalized name -> name as written, from the pinned lock."""
  pins = {}
  for line in (repo / REQUIREMENTS).read_text().splitlines():
    line = line.split('#', 1)[0].strip()
    if not line or line.startswith('-'):
      continue
    name = re.split(r'[<>=!~;\[ ]', line, 1)[0]
    pins[normalize_dist(name)] = name
  return pins


# ----------------------------------------------------------------------------
# The checks. Each returns a list of problems, as messages naming the BUILD file and the fix.


def _sort_key(value: str):
  """buildifier's order for label lists: plain files, ':local', '//abs', '@external'."""
  phase = (1 if value.startswith(':') else 2 if value.startswith('//') else
           3 if value.startswith('@') else 0)
  return phase, value.replace(':', '.').split('.'), value


def _display(label: str, package: str) -> str:
  """How a label is written in `package`'s BUILD file."""
  if label.startswith('@pypi//'):
    return f'requirement("{label[len("@pypi//"):]}")'
  pkg, name = split_label(label)
  if pkg == package:
    return f'":{name}"'
  if pkg.rsplit('/', 1)[-1] == name:
    return f'"//{pkg}"'
  return f'"{label}"'


def _written(value: str) -> str:
  """A list item as written in a BUILD file."""
  if value.startswith('@pypi//'):
    return f'requirement("{value[len("@pypi//"):]}")'
  return f'"{value}"'


class Checker:
  """All the facts the checks need, computed once."""

  def __init__(self, repo: Path):
    self.repo = repo
    self.packages = evaluate_build_files(repo)
    self.targets = all_targets(self.packages)
    self.modules = find_modules(repo)
    self.owners: Dict[str, List[Target]] = {}  # module path -> targets listing it in srcs
    for t in self.targets.values():
      if t.kind not in PY_RULES:
        continue
      for src in t.attr_list('srcs'):
        label = canonical(src, t.package)
        pkg, name = split_label(label)
        self.owners.setdefault(f'{pkg}/{name}' if pkg else name, []).append(t)
    self._imports: Dict[str, Imports] = {}

  def imports(self, path: str) -> Imports:
    if path not in self._imports:
      self._imports[path] = module_imports(self.repo, path)
    return self._imports[path]

  def owner(self, path: str) -> Optional[Target]:
    owners = self.owners.get(path, [])
    return owners[0] if len(owners) == 1 else None

  def py_targets(self) -> List[Target]:
    return [t for t in self.targets.values() if t.kind in PY_RULES]

  def deps(self, t: Target) -> List[str]:
    return [canonical(d, t.package) for d in t.attr_list('deps')]

  def data(self, t: Target) -> List[str]:
    return [canonical(d, t.package) for d in t.attr_list('data')]

  def own_module(self, t: Target) -> Optional[str]:
    """The module a py target declares (the first src in the tree)."""
    for src in t.attr_list('srcs'):
      pkg, name = split_label(canonical(src, t.package))
      path = f'{pkg}/{name}' if pkg else name
      if path in self.modules:
        return path
    return None

  # (a) ----------------------------------------------------------------------

  def check_coverage(self) -> List[str]:
    problems = []
    for path in self.modules:
      pkg_dir = Path(path).parent.as_posix()
      if pkg_dir not in self.packages:
        problems.append(f'{pkg_dir}/ has Python modules but no BUILD file; add {pkg_dir}/BUILD')
        continue
      kind, name = expected_rule(self.repo, path)
      owners = self.owners.get(path, [])
      fname = Path(path).name
      if not owners:
        problems.append(f'{pkg_dir}/BUILD: no target has {fname} in srcs; add '
                        f'{kind}(name = "{name}", srcs = ["{fname}"], ...)')
      elif len(owners) > 1:
        problems.append(f'{path} is in the srcs of {len(owners)} targets '
                        f'({", ".join(t.label for t in owners)}); keep it in one')
      else:
        t = owners[0]
        if t.package != pkg_dir:
          problems.append(f'{t.build_file}: {t.label} lists {path} from another package; '
                          f'declare it in {pkg_dir}/BUILD')
        elif (t.kind, t.name) != (kind, name):
          problems.append(f'{t.build_file}: {fname} is declared as {t.kind}(name = "{t.name}"); '
                          f'expected {kind}(name = "{name}")')
    return problems

  # (b) ----------------------------------------------------------------------

  def _resolves(self, label: str, as_file: bool) -> bool:
    if label.startswith('@'):
      return True
    pkg, name = split_label(label)
    if pkg not in self.packages:
      return False
    package = self.packages[pkg]
    if name in package.targets or name in package.generated:
      return True
    if not as_file:
      return False
    path = self.repo / pkg / name
    if not path.is_file():
      return False
    # A file belongs to the nearest enclosing package.
    rel = Path(pkg, name).parent
    while rel.as_posix() not in self.packages and rel != Path('.'):
      rel = rel.parent
    owner = '' if rel == Path('.') else rel.as_posix()
    return owner == pkg

  def check_labels(self) -> List[str]:
    problems = []
    for t in self.targets.values():
      for attr, as_file in (('srcs', True), ('data', True), ('deps', False), ('main', True)):
        for value in t.attr_list(attr):
          label = canonical(value, t.package)
          if not self._resolves(label, as_file):
            problems.append(f'{t.build_file}: {t.label} {attr} {value!r} does not exist')
            continue
          pkg, name = split_label(label)
          if (as_file and pkg != t.package and not label.startswith('@')
              and name not in self.packages[pkg].targets
              and name not in self.packages[pkg].generated
              and name not in self.packages[pkg].exported):
            problems.append(f'{t.build_file}: {t.label} uses {value!r}; add exports_files(["{name}"]) '
                            f'to {self.packages[pkg].build_file}')
      for value in t.attr_list('deps'):
        dep = self.targets.get(canonical(value, t.package))
        if dep is not None and dep.kind != 'py_library':
          problems.append(f'{t.build_file}: {t.label} deps {value!r} is a {dep.kind}; '
                          'depend on py_library targets only (put binaries in data)')
      if t.kind in PY_RULES:
        for src in t.attr_list('srcs'):
          if not src.endswith('.py'):
            problems.append(f'{t.build_file}: {t.label} srcs {src!r} is not a .py file')
    return problems

  # (c) ----------------------------------------------------------------------

  def closure(self, labels: Iterable[str]) -> Set[str]:
    """py targets reachable through deps and data."""
    seen: Set[str] = set()
    todo = [l for l in labels if l in self.targets]
    while todo:
      label = todo.pop()
      if label in seen:
        continue
      seen.add(label)
      t = self.targets[label]
      todo += [l for l in self.deps(t) + self.data(t)
               if l in self.targets and self.targets[l].kind in PY_RULES]
    return seen

  def enclosing_inits(self, path: str) -> List[str]:
    """The non-empty __init__.py files Python runs before importing `path`."""
    inits = []
    for parent in Path(path).parents:
      init = (parent / '__init__.py').as_posix()
      if parent != Path('.') and init != path and init in self.modules and not _trivial(
          self.repo / init):
        inits.append(init)
    return inits

  def required_internal(self, t: Target) -> Tuple[Dict[str, str], Dict[str, str], Set[str]]:
    """(needed in deps, needed in deps or data, also allowed in deps): label -> why."""
    path = self.own_module(t)
    deps: Dict[str, str] = {}
    runtime: Dict[str, str] = {}
    if path is None:
      return deps, runtime, set()
    imports = self.imports(path)
    for into, found in ((deps, imports.internal), (runtime, imports.runtime)):
      for module, how in found.items():
        owner = self.owner(module)
        if owner is not None and owner.label != t.label:
          into.setdefault(owner.label, how)
    if t.kind == 'py_test' and CONFTEST_PATH in self.modules and self.owner(CONFTEST_PATH):
      deps.setdefault(self.owner(CONFTEST_PATH).label, 'pytest loads tests/conftest.py')
    allowed: Set[str] = set()
    if t.kind in ('py_binary', 'py_test'):
      reached = self.closure(list(deps) + [r for r in runtime if r in self.data(t)]) | {t.label}
      for label in sorted(reached):
        module = self.own_module(self.targets[label])
        for init in self.enclosing_inits(module) if module else []:
          owner = self.owner(init)
          if owner is None:
            continue
          allowed.add(owner.label)
          if owner.label not in reached:
            deps.setdefault(owner.label, f'Python runs {init} before {module}')
    return deps, runtime, allowed

  def check_internal_deps(self) -> List[str]:
    problems = []
    for path in self.modules:
      problems += self.imports(path).problems
    for t in self.py_targets():
      deps, runtime, allowed = self.required_internal(t)
      have = set(self.deps(t))
      have_data = set(self.data(t))
      for label, how in sorted(deps.items()):
        if label not in have:
          problems.append(f'{t.build_file}: {t.label} ({how}) is missing a dep; add '
                          f'{_display(label, t.package)} to its deps')
      for label, how in sorted(runtime.items()):
        if label not in have and label not in have_data:
          problems.append(f'{t.build_file}: {t.label} ({how} in a subprocess) needs its files; add '
                          f'{_display(label, t.package)} to its data')
      unused = {d for d in have if not d.startswith('@')} - set(deps) - set(runtime) - allowed
      for label in sorted(unused):
        problems.append(f'{t.build_file}: {t.label} does not import {label}; remove '
                        f'{_display(label, t.package)} from its deps')
    return problems

  # (d) ----------------------------------------------------------------------

  def check_third_party_deps(self) -> List[str]:
    problems = []
    pins = read_requirements(self.repo)
    stdlib = stdlib_names()
    for t in self.py_targets():
      path = self.own_module(t)
      needed: Dict[str, str] = {}
      if path is not None:
        for top, how in self.imports(path).third_party.items():
          if top in stdlib:
            continue
          dist = IMPORT_TO_PIP.get(top, top)
          if normalize_dist(dist) not in pins:
            problems.append(f'{path}: `{how}`: {top!r} maps to no package pinned in '
                            f'{REQUIREMENTS}; pin it, or add {top!r} to IMPORT_TO_PIP in '
                            'tests/test_bazel_consistency.py')
            continue
          needed.setdefault(requirement_label(dist), how)
      if t.kind == 'py_test':
        needed.setdefault(requirement_label('pytest'), f'{PYTEST_RUNNER} imports pytest')
      have = {d for d in self.deps(t) if d.startswith('@')}
      for label, how in sorted(needed.items()):
        if label not in have:
          problems.append(f'{t.build_file}: {t.label} ({how}) is missing a dep; add '
                          f'{_display(label, t.package)} to its deps')
      for label in sorted(have - set(needed)):
        problems.append(f'{t.build_file}: {t.label} does not import {label[len("@pypi//"):]}; '
                        f'remove {_display(label, t.package)} from its deps')
    for t in self.targets.values():
      for dep in self.deps(t):
        if dep.startswith('@pypi//') and dep[len('@pypi//'):] not in pins:
          problems.append(f'{t.build_file}: {t.label} uses {_display(dep, t.package)}, which '
                          f'{REQUIREMENTS} does not pin')
        elif dep.startswith('@') and not dep.startswith('@pypi//'):
          problems.append(f'{t.build_file}: {t.label} dep {dep!r}: use requirement("...")')
    return problems

  # Extras -------------------------------------------------------------------

  def check_cycles(self) -> List[str]:
    graph = {t.label: [d for d in self.deps(t) if d in self.targets] for t in self.py_targets()}
    problems, state = [], {}

    def visit(node, stack):
      state[node] = 1
      for nxt in graph.get(node, []):
        if state.get(nxt) == 1:
          cycle = stack[stack.index(nxt):] + [nxt]
          problems.append(f'dependency cycle (Bazel rejects it): {" -> ".join(cycle)}')
        elif nxt not in state:
          visit(nxt, stack + [nxt])
      state[node] = 2

    for node in sorted(graph):
      if node not in state:
        visit(node, [node])
    return problems

  def check_tidy(self) -> List[str]:
    problems = []
    for pkg in self.packages.values():
      if pkg.default_visibility != ['//visibility:public']:
        problems.append(f'{pkg.build_file}: add package(default_visibility = ["//visibility:public"])')
    for t in self.targets.values():
      for attr in ('srcs', 'data', 'deps'):
        values = [v for v in t.attr_list(attr) if isinstance(v, str)]
        if values != sorted(values, key=_sort_key):
          problems.append(f'{t.build_file}: {t.label} {attr} are not sorted; use '
                          f'[{", ".join(_written(v) for v in sorted(values, key=_sort_key))}]')
        canon = [canonical(v, t.package) for v in values]
        if len(set(canon)) != len(canon):
          problems.append(f'{t.build_file}: {t.label} {attr} has duplicates')
    return problems

  def check_tests_run_pytest(self) -> List[str]:
    """A py_test of a pytest module must run pytest; run directly it would pass vacuously."""
    problems = []
    runner = canonical(PYTEST_RUNNER, '')
    for t in self.py_targets():
      if t.kind != 'py_test':
        continue
      path = self.own_module(t)
      fname = Path(path).name if path else '?'
      srcs = [canonical(s, t.package) for s in t.attr_list('srcs')]
      main = t.attrs.get('main')
      if runner not in srcs or main is None or canonical(main, t.package) != runner:
        problems.append(f'{t.build_file}: {t.label} must run pytest: add "{PYTEST_RUNNER}" to srcs '
                        f'and set main = "{PYTEST_RUNNER}"')
      if t.attr_list('args') != [f'$(rootpath {fname})']:
        problems.append(f'{t.build_file}: {t.label} must pass its test file to pytest: '
                        f'args = ["$(rootpath {fname})"]')
      if canonical(PYPROJECT, '') not in self.data(t):
        problems.append(f'{t.build_file}: {t.label} needs the pytest settings; add "{PYPROJECT}" '
                        'to its data')
    return problems

  def check_configs_data(self) -> List[str]:
    """Runnable targets whose source names configs/... ship the configs in their runfiles."""
    problems = []
    for t in self.py_targets():
      path = self.own_module(t)
      if t.kind == 'py_library' or path is None or path in STRING_SCAN_EXEMPT:
        continue
      tree = ast.parse((self.repo / path).read_text())
      if any('configs/' in (_string_value(n) or '') for n in ast.walk(tree)):
        if canonical(CONFIGS, '') not in self.data(t):
          problems.append(f'{t.build_file}: {t.label} reads configs/; add "{CONFIGS}" to its data')
    return problems

  def check_fixtures_data(self) -> List[str]:
    """Tests that name FIXTURES (tests/conftest.py) ship the fixture files in their runfiles."""
    problems = []
    for t in self.py_targets():
      path = self.own_module(t)
      if t.kind != 'py_test' or path is None or not names_fixtures((self.repo / path).read_text()):
        continue
      if canonical(FIXTURE_FILES, '') not in self.data(t):
        problems.append(f'{t.build_file}: {t.label} reads tests/fixtures; add "{FIXTURE_FILES}" '
                        'to its data')
    return problems

  def check_all(self) -> List[str]:
    return (self.check_coverage() + self.check_labels() + self.check_internal_deps() +
            self.check_third_party_deps() + self.check_cycles() + self.check_tidy() +
            self.check_tests_run_pytest() + self.check_configs_data() +
            self.check_fixtures_data())


def check_workspace(repo: Path) -> List[str]:
  problems = []
  path = repo / 'WORKSPACE'
  if not path.exists():
    return ['WORKSPACE is missing']
  text = path.read_text()
  code = '\n'.join(l.split('#', 1)[0] for l in text.splitlines())
  expect = {
      'workspace(name = "tff_meta")': r'workspace\(\s*name\s*=\s*"tff_meta"\s*\)',
      'http_archive(name = "rules_python", ...)': r'http_archive\(\s*name\s*=\s*"rules_python"',
      'pip_parse(name = "pypi", ...)': r'pip_parse\(\s*name\s*=\s*"pypi"',
      'requirements_lock = "//:requirements.txt"': r'requirements_lock\s*=\s*"//:requirements\.txt"',
      'python_version = "3.11"': r'python_version\s*=\s*"3\.11"',
      'install_deps()': r'\binstall_deps\(\)',
  }
  for what, pattern in expect.items():
    if not re.search(pattern, code):
      problems.append(f'WORKSPACE: expected {what}')
  root = evaluate_build_files(repo).get('')
  if root is None or REQUIREMENTS not in root.exported:
    problems.append(f'BUILD: add exports_files(["{REQUIREMENTS}"]) so pip_parse can read it')
  return problems


# ----------------------------------------------------------------------------
# Tests on the real tree.


@pytest.fixture(scope='module')
def checker():
  return Checker(REPO)


def _report(problems: List[str]):
  assert not problems, f'{len(problems)} Bazel declaration problem(s):\n  ' + '\n  '.join(problems)


def test_every_module_is_declared_once(checker):
  _report(checker.check_coverage())


def test_labels_resolve(checker):
  _report(checker.check_labels())


@pytest.mark.slow
def test_internal_imports_are_deps(checker):
  _report(checker.check_internal_deps() + checker.check_cycles())


def test_third_party_imports_are_requirements(checker):
  _report(checker.check_third_party_deps())


def test_build_files_are_tidy(checker):
  _report(checker.check_tidy())


def test_py_tests_run_pytest_with_their_data(checker):
  _report(checker.check_tests_run_pytest() + checker.check_configs_data())


def test_workspace():
  _report(check_workspace(REPO))


# ----------------------------------------------------------------------------
# The checker itself, on synthetic trees: it must be able to fail.

_ROOT_BUILD = '''
package(default_visibility = ["//visibility:public"])

exports_files(["pyproject.toml", "requirements.txt"])
'''

_TESTS_BUILD = '''
package(default_visibility = ["//visibility:public"])

genrule(name = "pytest_runner", outs = ["pytest_runner.py"], cmd = "true")
'''

_PKG_BUILD = '''
load("@pypi//:requirements.bzl", "requirement")
load("@rules_python//python:defs.bzl", "py_library")

package(default_visibility = ["//visibility:public"])

py_library(
    name = "pkg",
    srcs = ["__init__.py"],
)

py_library(
    name = "a",
    srcs = ["a.py"],
    deps = [
        ":b",
        "//tff_meta:registry",
        requirement("absl-py"),
        requirement("numpy"),
    ],
)

py_library(
    name = "b",
    srcs = ["b.py"],
)
'''


def _write_tree(root: Path, files: Dict[str, str]):
  for rel, text in files.items():
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def tiny(tmp_path):
  _write_tree(tmp_path, {
      'requirements.txt': 'absl-py==1.4.0\nnumpy==1.25.2\npytest==9.1.1\n',
      'pyproject.toml': '',
      'BUILD': _ROOT_BUILD,
      'tests/BUILD': _TESTS_BUILD,
      'tff_meta/BUILD': '''
          load("@rules_python//python:defs.bzl", "py_library")
          package(default_visibility = ["//visibility:public"])
          py_library(name = "tff_meta", srcs = ["__init__.py"])
          py_library(name = "registry", srcs = ["registry.py"])
          ''',
      'tff_meta/__init__.py': '',
      'tff_meta/registry.py': 'import collections\n',
      'tff_meta/pkg/BUILD': _PKG_BUILD,
      'tff_meta/pkg/__init__.py': 'from tff_meta.pkg.b import thing\n',
      'tff_meta/pkg/a.py': ('import numpy as np\nfrom absl import logging\n'
                            'from tff_meta.pkg import b\nfrom tff_meta.registry import Registry\n'),
      'tff_meta/pkg/b.py': 'thing = 1\n',
  })
  # The package __init__ imports b: its target must say so.
  build = tmp_path / 'tff_meta/pkg/BUILD'
  build.write_text(build.read_text().replace('srcs = ["__init__.py"],',
                                             'srcs = ["__init__.py"],\n    deps = [":b"],'))
  return tmp_path


def test_checker_accepts_a_consistent_tree(tiny):
  assert Checker(tiny).check_all() == []


def test_checker_names_the_missing_internal_dep(tiny):
  build = tiny / 'tff_meta/pkg/BUILD'
  build.write_text(build.read_text().replace('        "//tff_meta:registry",\n', ''))
  problems = Checker(tiny).check_all()
  assert problems == ['tff_meta/pkg/BUILD: //tff_meta/pkg:a (from tff_meta.registry import Registry) '
                      'is missing a dep; add "//tff_meta:registry" to its deps']


def test_checker_names_the_missing_requirement(tiny):
  build = tiny / 'tff_meta/pkg/BUILD'
  build.write_text(build.read_text().replace('        requirement("absl-py"),\n', ''))
  problems = Checker(tiny).check_all()
  assert problems == ['tff_meta/pkg/BUILD: //tff_meta/pkg:a (from absl import logging) is missing a '
                      'dep; add requirement("absl-py") to its deps']


def test_checker_finds_undeclared_missing_and_unused(tiny):
  _write_tree(tiny, {'tff_meta/pkg/c.py': 'import sklearn\nfrom tff_meta.pkg import thing\n'})
  build = tiny / 'tff_meta/pkg/BUILD'
  build.write_text(build.read_text().replace('srcs = ["b.py"]', 'srcs = ["b.py", "gone.py"]')
                   .replace('        ":b",\n', '        ":b",\n        ":pkg",\n'))
  problems = '\n'.join(Checker(tiny).check_all())
  assert 'tff_meta/pkg/BUILD: no target has c.py in srcs; add py_library(name = "c"' in problems
  assert "tff_meta/pkg/BUILD: //tff_meta/pkg:b srcs 'gone.py' does not exist" in problems
  assert ('tff_meta/pkg/BUILD: //tff_meta/pkg:a does not import //tff_meta/pkg:pkg; '
          'remove ":pkg" from its deps') in problems
  # c.py is undeclared, so its imports are not checked against a target, but unknown
  # third-party names are still reported once it is declared:
  build.write_text(build.read_text() + '\npy_library(name = "c", srcs = ["c.py"], deps = [":pkg"])\n')
  problems = '\n'.join(Checker(tiny).check_all())
  assert "tff_meta/pkg/c.py: `import sklearn`: 'sklearn' maps to no package pinned" in problems


def test_checker_resolves_symbols_vs_submodules_and_lazy_imports(tiny):
  _write_tree(tiny, {
      'tff_meta/pkg/lazy.py': '''
          import importlib
          LOADERS = {'x': 'b'}
          def load(name):
            return importlib.import_module(f'tff_meta.pkg.{LOADERS[name]}')
          ''',
      'tff_meta/pkg/sym.py': 'from tff_meta.pkg import thing, b\n',
  })
  build = tiny / 'tff_meta/pkg/BUILD'
  build.write_text(build.read_text() + textwrap.dedent('''
      py_library(name = "lazy", srcs = ["lazy.py"])
      py_library(name = "sym", srcs = ["sym.py"], deps = [":b"])
      '''))
  problems = Checker(tiny).check_all()
  assert sorted(problems) == [
      "tff_meta/pkg/BUILD: //tff_meta/pkg:lazy (import_module(f'tff_meta.pkg.{...}') with 'b') is "
      'missing a dep; add ":b" to its deps',
      'tff_meta/pkg/BUILD: //tff_meta/pkg:sym (from tff_meta.pkg import thing, b) is missing a dep; '
      'add ":pkg" to its deps',
  ]


def test_checker_finds_cycles_and_unsorted_deps(tiny):
  build = tiny / 'tff_meta/pkg/BUILD'
  text = build.read_text().replace('srcs = ["b.py"],', 'srcs = ["b.py"],\n    deps = [":pkg"],')
  text = text.replace('        ":b",\n        "//tff_meta:registry",\n',
                      '        "//tff_meta:registry",\n        ":b",\n')
  build.write_text(text)
  _write_tree(tiny, {'tff_meta/pkg/b.py': 'import tff_meta.pkg\nthing = 1\n'})
  problems = '\n'.join(Checker(tiny).check_all())
  assert 'dependency cycle (Bazel rejects it): //tff_meta/pkg:b -> //tff_meta/pkg:pkg -> //tff_meta/pkg:b' in problems
  assert ('//tff_meta/pkg:a deps are not sorted; use [":b", "//tff_meta:registry", '
          'requirement("absl-py"), requirement("numpy")]') in problems


def test_checker_wants_py_tests_to_run_pytest(tiny):
  _write_tree(tiny, {'tests/__init__.py': '', 'tests/test_x.py': 'def test_x():\n  pass\n'})
  build = tiny / 'tests/BUILD'
  build.write_text(build.read_text() + textwrap.dedent('''
      py_library(name = "tests", srcs = ["__init__.py"])
      py_test(name = "test_x", srcs = ["test_x.py"], deps = [requirement("pytest")])
      '''))
  problems = '\n'.join(Checker(tiny).check_all())
  assert ('tests/BUILD: //tests:test_x must run pytest: add "//tests:pytest_runner.py" to srcs'
          in problems)
  assert 'args = ["$(rootpath test_x.py)"]' in problems


@pytest.mark.slow
def test_checker_on_a_copy_of_this_repo_with_one_dep_removed(tmp_path):
  """Removing any one first-party dep line from the real BUILD files is caught."""
  import shutil  # pylint: disable=g-import-not-at-top
  for name in ('WORKSPACE', 'BUILD', REQUIREMENTS, 'pyproject.toml', '.bazelignore'):
    if (REPO / name).exists():
      shutil.copy(REPO / name, tmp_path / name)
  for root in PY_ROOTS + ('configs',):
    if (REPO / root).is_dir():
      shutil.copytree(REPO / root, tmp_path / root,
                      ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
  before = Checker(tmp_path).check_all()
  # The first first-party dep line of the library's BUILD files.
  for build in sorted((tmp_path / 'tff_meta').rglob('BUILD')):
    lines = build.read_text().splitlines(keepends=True)
    victim = next((i for i, l in enumerate(lines)
                   if re.fullmatch(r'\s+"(//|:)[^".]+",\n', l)), None)
    if victim is not None:
      break
  assert victim is not None, 'no first-party dep found in tff_meta/**/BUILD'
  removed = lines[victim].strip().rstrip(',')
  del lines[victim]
  build.write_text(''.join(lines))
  after = Checker(tmp_path).check_all()
  new = [p for p in after if p not in before]
  assert new and all(f'add {removed} to its deps' in p for p in new), (removed, new)
