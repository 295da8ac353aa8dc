"""tff_meta/runtime/priority.py: a worker in its own session stays as nice as its program."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tff_meta.runtime import priority

MODULE = os.path.join(REPO, 'tff_meta', 'runtime', 'priority.py')


def test_reads_the_nice_value_of_an_autogroup_line(tmp_path):
  line = tmp_path / 'autogroup'
  line.write_text('/autogroup-123 nice 7\n')
  assert priority.autogroup_nice(str(line)) == 7
  line.write_text('/autogroup-123 nice\n')
  assert priority.autogroup_nice(str(line)) is None
  assert priority.autogroup_nice(str(tmp_path / 'absent')) is None


def test_writes_only_positive_values(tmp_path):
  target = tmp_path / 'autogroup'
  target.write_text('')
  assert not priority.set_autogroup_nice(0, str(target))
  assert target.read_text() == ''
  assert priority.set_autogroup_nice(6, str(target))
  assert target.read_text() == '6'
  assert not priority.set_autogroup_nice(6, str(tmp_path / 'no' / 'such'))


def _child_autogroup(increment: int, keep: bool) -> int:
  """Under `nice -n <increment>` (relative to the test's own niceness: `make test` may run
  under nice), the autogroup nice of a child started in a new session."""
  code = f"""
import importlib.util, subprocess
spec = importlib.util.spec_from_file_location('priority', {MODULE!r})
priority = importlib.util.module_from_spec(spec); spec.loader.exec_module(priority)
kwargs = dict(preexec_fn=priority.preexec_for_worker()) if {keep} else {{}}
out = subprocess.run(['cat', '/proc/self/autogroup'], start_new_session=True,
                     capture_output=True, text=True, check=True, **kwargs).stdout
print(out.split()[-1])
"""
  proc = subprocess.run(['nice', '-n', str(increment), sys.executable, '-c', code],
                        capture_output=True, text=True, timeout=60, check=True)
  return int(proc.stdout.strip())


@pytest.mark.skipif(not os.path.exists('/proc/self/autogroup'), reason='kernel has no autogroups')
def test_a_new_session_keeps_the_programs_niceness():
  assert _child_autogroup(4, keep=False) == 0    # what setsid alone gives: full weight
  assert _child_autogroup(4, keep=True) == priority.nice_under(4)
