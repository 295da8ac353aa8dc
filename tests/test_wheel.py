"""The wheel: built from the sources, installed in a fresh venv, its `tff-meta` command trains
the demo from a folder outside the checkout with the shipped configs.

The fresh venv gets the wheel alone (pip --no-deps); the lock's packages (TensorFlow, TFF, ...)
are the ones this test runs with, made visible to the venv by a .pth file that adds their
site-packages as a site directory, instead of downloading them again. Neither the checkout
nor its folders are on the venv's path: the command must find programs and configs in the
wheel.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile

import pytest

from tff_meta.core import config_file

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ('pyproject.toml', 'setup.py', 'README.md', 'tff_meta', 'programs', 'configs')


def _run(cmd, **kwargs):
  return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
  """(the venv's bin folder, the wheel's path)."""
  root = tmp_path_factory.mktemp('wheel')
  source = root / 'source'   # a copy: building writes build/ and *.egg-info beside the sources
  for name in SOURCES:
    src = os.path.join(REPO, name)
    if os.path.isdir(src):
      shutil.copytree(src, source / name, ignore=shutil.ignore_patterns('__pycache__'))
    else:
      os.makedirs(source, exist_ok=True)
      shutil.copy(src, source / name)
  build = _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation',
                '-w', str(root / 'dist'), str(source)])
  assert build.returncode == 0, build.stderr
  wheel, = (root / 'dist').glob('tff_meta-*.whl')
  venv = root / 'venv'
  made = _run([sys.executable, '-m', 'venv', '--without-pip', str(venv)])
  assert made.returncode == 0, made.stderr
  python = venv / 'bin' / 'python'
  site_packages = _run([str(python), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'])
  lock = sysconfig.get_paths()['purelib']   # this interpreter's: the lock, installed
  with open(os.path.join(site_packages.stdout.strip(), 'lock.pth'), 'w') as f:
    f.write(f'import site; site.addsitedir({lock!r})\n')
  install = _run([sys.executable, '-m', 'pip', '--python', str(python), 'install', '--no-deps',
                  '--no-index', str(wheel)])
  assert install.returncode == 0, install.stderr
  return venv / 'bin', wheel


def _env(bin_dir):
  env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
  env['PATH'] = f'{bin_dir}{os.pathsep}{env["PATH"]}'
  return env


def test_the_wheel_ships_programs_and_configs(installed):
  _, wheel = installed
  names = zipfile.ZipFile(wheel).namelist()
  shipped = {f'tff_meta/configs/{n}.toml' for n in config_file.shipped_configs()}
  assert len(shipped) > 10 and shipped <= set(names)
  assert 'programs/train.py' in names and 'tff_meta/console.py' in names
  assert not [n for n in names if n.startswith(('tests/', 'configs/'))]
  entry_points = next(n for n in names if n.endswith('entry_points.txt'))
  assert 'tff-meta = tff_meta.console:main' in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_tff_meta_trains_the_demo_outside_the_checkout(installed, tmp_path):
  bin_dir, _ = installed
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()
  out = tmp_path / 'run'
  proc = _run([str(bin_dir / 'tff-meta'), 'train', '--config=demo', '--rounds=3',
               f'--output_dir={out}', '--progress=false'], cwd=elsewhere, env=_env(bin_dir))
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads((out / 'results.json').read_text())['summary']
  assert summary['rounds'] == 3 and summary['test_clients'] > 0
  assert 0.0 <= summary['accuracy'] <= 100.0
  with open(config_file.resolve_config('demo'), 'rb') as f:   # the shipped demo config ran
    demo = tomllib.load(f)
  ran = tomllib.loads((out / 'config.toml').read_text())
  assert (ran['name'], ran['dataset'], ran['rounds']) == (demo['name'], 'digits', 3)
  assert len((out / 'metrics.csv').read_text().splitlines()) == 1 + 3
  assert 'Outputs in' in proc.stdout
  # the code that ran is the wheel's, not the checkout's
  where = _run([str(bin_dir / 'python'), '-c', 'import programs, tff_meta; '
                'print(tff_meta.__file__); print(programs.__file__)'], cwd=elsewhere,
               env=_env(bin_dir))
  assert where.returncode == 0, where.stderr
  assert all(path.startswith(str(bin_dir.parent)) for path in where.stdout.split()), where.stdout
  assert not os.listdir(elsewhere)


def test_tff_meta_names_its_programs_and_refuses_unknown_ones(installed, tmp_path):
  bin_dir, _ = installed
  listing = _run([str(bin_dir / 'tff-meta')], cwd=tmp_path, env=_env(bin_dir))
  assert listing.returncode == 0 and '  train ' in listing.stdout and '  report ' in listing.stdout
  configs = _run([str(bin_dir / 'tff-meta'), 'configs'], cwd=tmp_path, env=_env(bin_dir))
  assert 'demo/digits' in configs.stdout.split()
  typo = _run([str(bin_dir / 'tff-meta'), 'trian'], cwd=tmp_path, env=_env(bin_dir))
  assert typo.returncode == 1 and 'did you mean train?' in typo.stderr
  bad = _run([str(bin_dir / 'tff-meta'), 'train', '--config=table2_femnist_p20_mam',
              f'--output_dir={tmp_path / "x"}'], cwd=tmp_path, env=_env(bin_dir))
  lines = bad.stderr.strip().splitlines()
  assert bad.returncode == 1 and len(lines) == 1 and lines[0].startswith('error: '), bad.stderr
  assert 'fedmeta/table2_femnist_p20_maml' in lines[0]
  assert not os.path.exists(tmp_path / 'x')
