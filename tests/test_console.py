"""tff_meta/console.py: the `tff-meta` command finds the programs and runs them as `python -m`."""

import os
import subprocess
import sys

import pytest

from tff_meta import console

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_program_module_is_found_and_nothing_else():
  found = console.programs()
  scripts = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, 'programs'))
                   if f.endswith('.py') and "__name__ == '__main__'" in open(
                       os.path.join(REPO, 'programs', f), encoding='utf-8').read())
  assert list(found) == scripts and {'train', 'report', 'sweep', 'compare'} <= set(found)
  assert found['train'].startswith('Trains any task from its config')
  usage = console.usage(found)
  assert all(f'  {name} ' in usage for name in found)


def test_unknown_program_is_one_error_line(capsys):
  assert console.main(['trian']) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: tff-meta has no program 'trian'; did you "
                                             'mean train?')


@pytest.mark.slow
def test_a_program_runs_as_python_dash_m(tmp_path):
  # A subprocess: a program defines its absl flags when it runs, once per process.
  # programs.report loads no TensorFlow, and an empty folder has no runs: one error line.
  args = ['report', f'--runs={tmp_path}', f'--output_dir={tmp_path / "out"}']
  via_console = subprocess.run([sys.executable, '-m', 'tff_meta.console', *args], cwd=REPO,
                               capture_output=True, text=True, timeout=120)
  via_module = subprocess.run([sys.executable, '-m', 'programs.report', *args[1:]], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
  assert via_console.returncode == via_module.returncode == 1
  assert via_console.stderr == via_module.stderr and via_console.stderr.startswith('error: ')
  assert not os.path.exists(tmp_path / 'out')
