"""The BUILD files under tff_meta/, programs/, research/, benchmarks/ and tests/ are what
.ci/gen_bazel.py generates from the imports (a unified diff and the fix otherwise), every
third-party import is pinned in requirements.txt, and WORKSPACE pip_parses requirements.txt
for Python 3.11. No TF import."""
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The real checkout, also when Bazel runs this test from a runfiles tree of symlinks.
REPO = Path(os.path.realpath(__file__)).parent.parent
_spec = importlib.util.spec_from_file_location('gen_bazel', REPO / '.ci' / 'gen_bazel.py')
gen_bazel = sys.modules['gen_bazel'] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_bazel)


@functools.lru_cache(maxsize=None)
def generated():
  return gen_bazel.generate(REPO)


def test_build_files_are_generated():
  stale = gen_bazel.diff(REPO, generated()[0])
  if stale:
    pytest.fail('the BUILD files do not match the sources; run python .ci/gen_bazel.py\n' + stale,
                pytrace=False)


def test_every_import_resolves_and_is_pinned():
  if generated()[1]:
    pytest.fail('\n'.join(generated()[1]), pytrace=False)


def test_workspace():
  code = '\n'.join(l.split('#', 1)[0] for l in (REPO / 'WORKSPACE').read_text().splitlines())
  for pattern in (r'workspace\(\s*name\s*=\s*"tff_meta"\s*\)',
                  r'http_archive\(\s*name\s*=\s*"rules_python"',
                  r'pip_parse\(\s*name\s*=\s*"pypi"',
                  r'requirements_lock\s*=\s*"//:requirements\.txt"',
                  r'python_version\s*=\s*"3\.11"',
                  r'\binstall_deps\(\)'):
    assert re.search(pattern, code), f'WORKSPACE: expected {pattern}'
  root = (REPO / 'BUILD').read_text()
  assert re.search(r'exports_files\(\[[^\]]*"requirements\.txt"', root), (
      'BUILD: add exports_files(["requirements.txt"]) so pip_parse can read it')


# The test must be able to fail: on a copy of the sources and BUILD files.


@pytest.fixture
def copy(tmp_path):
  shutil.copy(REPO / 'requirements.txt', tmp_path)
  shutil.copytree(REPO / '.ci', tmp_path / '.ci', ignore=shutil.ignore_patterns('__pycache__'))
  def skip(folder, names):  # only the sources and BUILD files
    return [n for n in names if not (n.endswith('.py') or n == 'BUILD' or
                                     os.path.isdir(os.path.join(folder, n)))]
  for root in gen_bazel.src.PY_ROOTS:
    shutil.copytree(REPO / root, tmp_path / root, ignore=skip)
  return tmp_path


def test_a_removed_dep_line_shows_in_the_diff(copy):
  build = copy / 'tff_meta/algorithms/BUILD'
  lines = build.read_text().splitlines(keepends=True)
  victim = next(i for i, l in enumerate(lines) if re.fullmatch(r' +"(//|:)[^"]+",\n', l))
  removed = lines.pop(victim)
  build.write_text(''.join(lines))
  stale = gen_bazel.diff(copy, gen_bazel.generate(copy)[0])
  assert f'+{removed}' in stale.splitlines(keepends=True)
  assert stale.startswith('--- a/tff_meta/algorithms/BUILD\n')


def test_a_new_module_and_an_unpinned_import_are_caught(copy):
  (copy / 'tff_meta/core/extra.py').write_text('import notpinned\nfrom tff_meta.core import registry\n')
  files, problems = gen_bazel.generate(copy)
  stale = gen_bazel.diff(copy, files)
  assert '+    name = "extra",\n' in stale and '+    deps = [":registry"],\n' in stale
  assert [p.split(';')[0] for p in problems] == [
      "tff_meta/core/extra.py: `import notpinned`: 'notpinned' is not pinned in requirements.txt"]


def test_check_exits_1_with_the_diff_until_regenerated(copy):
  (copy / 'programs/BUILD').unlink()
  (copy / 'tests/stale').mkdir()
  (copy / 'tests/stale/BUILD').write_text('# a package that moved\n')

  def run(*args):
    return subprocess.run([sys.executable, str(copy / '.ci/gen_bazel.py'), *args],
                          capture_output=True, text=True, check=False)

  check = run('--check')
  assert check.returncode == 1, check
  assert '+++ b/programs/BUILD' in check.stdout and '+++ /dev/null' in check.stdout
  assert check.stderr.strip().splitlines()[-1] == (
      'error: the BUILD files do not match the sources; run python .ci/gen_bazel.py')
  assert not (copy / 'programs/BUILD').exists()  # --check writes nothing
  assert run().returncode == 0
  assert run('--check').returncode == 0
  assert (copy / 'programs/BUILD').read_text() == (REPO / 'programs/BUILD').read_text()
  assert not (copy / 'tests/stale/BUILD').exists()
