"""The long-run scripts (configs/fedmeta/table2_queue.sh, configs/fewround/long_run.sh), dry-run.

They run for many sessions in the background, so a typo in a cell costs a
session of compute. Each script runs here with PY=echo: every cell's
command is printed instead of run, and each must name configs that exist,
flags the program defines, and (for the queue) a Table 2 cell config.
"""

import os
import re
import shlex
import subprocess

import pytest

from tff_meta import config_file
from tff_meta.fewround.config import FewRoundConfig
from tff_meta.program import config as program_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dry_run(script, tmp_path, **env):
  """The commands `script` would run (PY=echo), as argument lists after the module name."""
  out = subprocess.run(
      ['bash', os.path.join(ROOT, script)], capture_output=True, text=True, timeout=60,
      env={**os.environ, 'PY': 'echo', 'NICE': '0', **env}, cwd=tmp_path, check=False)
  assert out.returncode == 0, out.stderr
  commands = [shlex.split(line) for line in out.stdout.splitlines() if line.startswith('-m ')]
  assert commands, out.stdout
  return commands


def _flags(args):
  return dict(re.match(r'--([^=]+)=?(.*)', a).groups() for a in args if a.startswith('--'))


def _known(cls):
  return {f.name for f in config_file.scalar_fields(cls)} | set(config_file.renamed_of(cls))


def test_table2_queue_names_existing_cells(tmp_path):
  commands = _dry_run('configs/fedmeta/table2_queue.sh', tmp_path, OUT=str(tmp_path / 'out'))
  reproduce = [c for c in commands if c[1] == 'programs.reproduce']
  train = [c for c in commands if c[1] == 'programs.train']
  assert len(reproduce) >= 20 and len(train) == 3
  for command in reproduce:
    flags = _flags(command[2:])
    assert set(flags) <= {'progress', 'datasets', 'cache_dir', 'output_root', 'supports',
                          'seeds', 'methods'}, flags
    cell = f"table2_{flags['datasets']}_p{flags['supports']}_{flags['methods']}.toml"
    assert os.path.exists(os.path.join(ROOT, 'configs/fedmeta', cell)), cell
  known = {*program_config.TOP_LEVEL, *program_config.HPARAMS, 'cache_dir', 'progress'}
  runs = [_flags(c[2:]) for c in train]
  for flags in runs:
    assert os.path.exists(os.path.join(ROOT, flags['config'])), flags['config']
    assert set(flags) - {'config'} <= known, set(flags) - known
  assert [f.get('weighting') for f in runs] == [None, None, 'uniform']
  assert [os.path.basename(f['config']) for f in runs[:2]] == [
      'table2_shakespeare_p20_maml_reduced.toml', 'table2_shakespeare_p20_fedavg_reduced.toml']
  assert len({f['output_dir'] for f in runs}) == 3


def test_long_run_cells_name_existing_configs_and_known_flags(tmp_path):
  commands = _dry_run('configs/fewround/long_run.sh', tmp_path, SEEDS='0 1',
                      OUT=str(tmp_path / 'out'))
  known = _known(FewRoundConfig) | {'config', 'data_path', 'progress'}
  for command in commands:
    assert command[1] == 'programs.few_round'
    flags = _flags(command[2:])
    assert os.path.exists(os.path.join(ROOT, flags['config'])), flags['config']
    assert set(flags) <= known, set(flags) - known
  folders = [_flags(c[2:])['output_dir'] for c in commands]
  assert len(folders) == len(set(folders))                   # no two cells share a folder
  assert sum('noniid' in f for f in folders) == 6            # baselines, FRL-tau, FRL; 2 seeds
  tau = [_flags(c[2:]) for c in commands if '/frl_tau/' in _flags(c[2:])['output_dir']]
  assert [(f['methods'], f['temperature']) for f in tau] == [('frl_distance', 'learned')] * 4
  assert all(_flags(c[2:]).get('iid') == 'false' for c in commands if 'noniid' in
             _flags(c[2:])['output_dir'])


@pytest.mark.parametrize('script', ['configs/fedmeta/table2_queue.sh',
                                    'configs/fewround/long_run.sh'])
def test_scripts_are_executable(script):
  assert os.access(os.path.join(ROOT, script), os.X_OK)
