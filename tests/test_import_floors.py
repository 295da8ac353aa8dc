"""No import climbs back up: a module of `tff_meta` imports only its own package and the
packages on the floors below it (docs/ARCHITECTURE.md, 'The floors'), nothing of `programs`,
`research` or `benchmarks`. Every import counts, also one inside a function. No TF import."""
import ast
import os
from pathlib import Path

import pytest

REPO = Path(os.path.realpath(__file__)).parent.parent
PACKAGE = REPO / 'tff_meta'

# Bottom to top. A package may import the packages of lower floors only; two packages on one
# floor do not import each other.
FLOORS = (
    ('core',),
    ('data', 'learning', 'models'),
    ('evaluation',),
    ('algorithms',),
    ('runtime',),
    ('classification', 'fewround', 'recommendation'),   # the tasks
    ('analysis', 'catalog'),                            # TF-free readers of run folders
    ('program',),                                       # tff.program glue: task registry, flags
    ('console',),                         # the `tff-meta` command: runs programs/, above them all
)
FLOOR = {name: i for i, names in enumerate(FLOORS) for name in names}
# tff_meta/__init__.py drops TFF's default context at exit (runtime.shutdown), imported lazily
# inside the atexit hook: it is the package's root, not a floor.
ROOT_EXEMPT = {('__init__', 'runtime')}


def _owner(path: Path) -> str:
  rel = path.relative_to(PACKAGE).parts
  return rel[0] if len(rel) > 1 else rel[0][:-len('.py')]


def imports(path: Path):
  """(line, imported top-level name) of every import in `path`, lazy ones included."""
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names = [node.module]
    else:
      continue
    for name in names:
      yield node.lineno, name


def climbs():
  found = []
  for path in sorted(PACKAGE.rglob('*.py')):
    owner = _owner(path)
    rel = str(path.relative_to(REPO))
    for line, name in imports(path):
      top, _, rest = name.partition('.')
      if top in ('programs', 'research', 'benchmarks', 'tests') and owner != 'console':
        found.append(f'{rel}:{line} imports {name} (outside the package)')
        continue
      if top != 'tff_meta' or not rest:
        continue
      target = rest.split('.')[0]
      if target == owner or (owner, target) in ROOT_EXEMPT:
        continue
      if owner not in FLOOR or target not in FLOOR:
        found.append(f'{rel}:{line} imports {name}: add {owner!r} or {target!r} to FLOORS')
      elif FLOOR[target] >= FLOOR[owner]:
        found.append(f'{rel}:{line} imports {name}: {owner} (floor {FLOOR[owner]}) may import '
                     f'only floors below it; {target} is on floor {FLOOR[target]}')
  return found


def test_no_import_climbs_back_up():
  found = climbs()
  if found:
    pytest.fail('imports that climb back up:\n' + '\n'.join(found), pytrace=False)


def test_every_package_has_a_floor():
  packages = {p.stem for p in PACKAGE.glob('*.py')} | {
      p.name for p in PACKAGE.iterdir() if (p / '__init__.py').exists()}
  packages.discard('__init__')
  assert packages <= set(FLOOR), sorted(packages - set(FLOOR))


def test_the_check_sees_a_climb(tmp_path):
  bad = tmp_path / 'bad.py'
  bad.write_text('def f():\n  from tff_meta.program import tasks\n')
  assert list(imports(bad)) == [(2, 'tff_meta.program')]


def test_architecture_draws_the_floors():
  text = (REPO / 'docs' / 'ARCHITECTURE.md').read_text()
  for names in FLOORS:
    for name in names:
      assert name in text
