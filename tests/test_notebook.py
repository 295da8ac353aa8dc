"""notebooks/quickstart.ipynb runs top to bottom, and leaves no TFF worker behind.

On Python 3.11 the notebook is executed with nbclient on the `python3` kernel
of this interpreter (ipykernel from requirements.txt), from the notebooks/
folder, as a user would run it locally: its set-up cell must find the checkout
and install nothing. On Python 3.12 (Colab's runtime) it is executed on a
kernel of a Python 3.12 venv that the tests make once (ipykernel, pandas,
matplotlib; cached in the temp folder), from a folder outside the checkout with
TFF_META_REPO naming the checkout: the set-up cell makes a Python 3.11
environment with uv and installs the lock there (from the package index, or
uv's cache), and the notebook trains with programs.compare in it. A cell that
raises fails the test.
"""

import fcntl
import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid

import ipykernel.kernelspec  # the notebook's python3 kernel, which nbclient starts
import nbclient
import nbformat
import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.conftest import REPO

NOTEBOOK = os.path.join(REPO, 'notebooks', 'quickstart.ipynb')
MARKER = 'TFF_META_NOTEBOOK_TEST'


def _stream_text(nb) -> str:
  return ''.join(o.get('text', '') for cell in nb.cells if cell.cell_type == 'code'
                 for o in cell.get('outputs', []) if o.get('output_type') == 'stream')


def _marked_worker_pids(marker: str):
  """PIDs of worker_binary processes whose environment carries `marker` (started by our kernel)."""
  found = []
  for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        if b'worker_binary' not in f.read():
          continue
      with open(f'/proc/{pid}/environ', 'rb') as f:
        if marker.encode() in f.read():
          found.append(int(pid))
    except OSError:   # gone, or not ours to read
      continue
  return found


def _alive(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().split(') ', 1)[1][0] != 'Z'
  except OSError:
    return False


def _code_cells(nb):
  return [cell for cell in nb.cells if cell.cell_type == 'code']


def test_the_notebook_is_valid():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  assert nb.metadata.kernelspec.name == 'python3'
  assert not any(cell.get('outputs') for cell in _code_cells(nb)), (
      'commit the notebook without outputs')


def test_the_python_check_comes_before_any_install():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  first, install = _code_cells(nb)[:2]
  assert 'REPO_URL = ' in first.source and 'sys.version_info' in first.source
  assert "os.environ.get('TFF_META_REPO'" in first.source
  # Nothing runs before the check: no pip, no subprocess, no shell or magic line.
  assert not re.search(r'pip|subprocess|^\s*[!%]', first.source, re.MULTILINE), first.source
  assert sum('REPO_URL = ' in cell.source for cell in nb.cells) == 1, 'REPO_URL is set once'
  # Python 3.11: only TFF's pins and this package go in, never the whole lock over Colab's
  # packages. Later Pythons: the whole lock, with --no-deps, into the uv-made 3.11 environment.
  assert "f'{source}[colab]'" in install.source
  assert re.search(r"'--no-deps',\s*f'tensorflow-federated==\{TFF_VERSION\}'", install.source)
  assert re.search(r"\['venv', [^]]*'--python', '3\.11',\s*ENV_DIR\]", install.source)
  assert re.search(r"\['pip', 'install', [^]]*'--python', python, '--no-deps', '-r', lock\]",
                   install.source)
  assert "lock = os.path.join(source, 'requirements.txt')" in install.source


def _requirements(specs):
  from packaging.requirements import Requirement
  return {canonicalize_name(r.name): r for r in map(Requirement, specs)}


def test_the_colab_extra_is_tffs_own_pins_and_the_lock_satisfies_it():
  """pyproject's `colab` extra = TFF 0.87's Requires-Dist (jaxlib 0.4.13 for 0.4.14) + Colab staples."""
  with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
    extra = _requirements(tomllib.load(f)['project']['optional-dependencies']['colab'])
  tff_dist = importlib.metadata.distribution('tensorflow-federated')
  tff_pins = _requirements(r for r in tff_dist.requires if 'extra ==' not in r)
  assert set(tff_pins) <= set(extra), set(tff_pins) - set(extra)
  for name, req in tff_pins.items():
    expected = '==0.4.13' if name == 'jaxlib' else str(req.specifier)
    assert str(extra[name].specifier) == str(SpecifierSet(expected)), (name, extra[name])
  # Beyond TFF's pins: unpinned packages Colab already has, which the notebook imports.
  assert {n for n in extra if n not in tff_pins} == {'matplotlib', 'pandas', 'scikit-learn'}
  assert all(not extra[n].specifier for n in extra if n not in tff_pins)
  # The lock (what the tests run on) satisfies every pin, and TFF's version is the lock's.
  lock = {}
  with open(os.path.join(REPO, 'requirements.txt')) as f:
    for line in f:
      if '==' in line and not line.startswith('#'):
        name, version = line.strip().split('==')
        lock[canonicalize_name(name)] = version
  for name, req in extra.items():
    assert req.specifier.contains(lock[name], prereleases=True), (name, lock[name], req)
  nb = nbformat.read(NOTEBOOK, as_version=4)
  assert f"TFF_VERSION = '{lock['tensorflow-federated']}'" in _code_cells(nb)[1].source
  assert tff_dist.version == lock['tensorflow-federated']


def _client(nb, marker, monkeypatch, tmp_path):
  """A client that runs `nb` on this interpreter's python3 kernel, from notebooks/."""
  # A `python3` kernel spec for sys.executable, first on the Jupyter path, so that
  # no user-level `python3` kernel of another interpreter is picked up.
  os.makedirs(tmp_path / 'kernels', exist_ok=True)
  ipykernel.kernelspec.write_kernel_spec(tmp_path / 'kernels' / 'python3')
  monkeypatch.setenv('JUPYTER_PATH', str(tmp_path))
  # Inherited by the kernel and by the workers it starts: identifies them in /proc.
  monkeypatch.setenv(MARKER, marker)
  monkeypatch.setenv('TF_CPP_MIN_LOG_LEVEL', '2')
  return nbclient.NotebookClient(
      nb, kernel_name='python3', timeout=300, allow_errors=False,
      resources={'metadata': {'path': os.path.join(REPO, 'notebooks')}})


def _execute(nb, marker, monkeypatch, tmp_path):
  """Runs `nb` (see `_client`); fails on a raising cell."""
  client = _client(nb, marker, monkeypatch, tmp_path)
  try:
    client.execute()   # shuts the kernel down when done
  except nbclient.exceptions.CellExecutionError as e:
    pytest.fail(f'a notebook cell raised:\n{str(e)[-4000:]}')
  text = _stream_text(nb)
  # The kernel is this interpreter, running from the checkout: nothing was installed.
  assert f'Running locally from {REPO} (Python {sys.prefix}); nothing to install.' in text, text
  return text


def _assert_no_worker_left(pid, marker):
  deadline = time.monotonic() + 15
  while (_alive(pid) or _marked_worker_pids(marker)) and time.monotonic() < deadline:
    time.sleep(0.2)
  assert not _alive(pid), f'TFF worker {pid} outlived the notebook kernel'
  assert not _marked_worker_pids(marker), 'a TFF worker started by the notebook is still running'


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
def test_quickstart_notebook_runs_and_stops_its_worker(monkeypatch, tmp_path):
  marker = uuid.uuid4().hex
  nb = nbformat.read(NOTEBOOK, as_version=4)
  start = time.monotonic()
  text = _execute(nb, marker, monkeypatch, tmp_path)
  elapsed = time.monotonic() - start
  pid = int(re.search(r'TFF worker pid (\d+)', text).group(1))
  for method in ('FedAvg', 'FedMeta(Meta-SGD)'):
    m = re.search(re.escape(method) + r': ([\d.]+)% on test query sets', text)
    assert m, text
    assert 20.0 < float(m.group(1)) <= 100.0, text
  outputs = [o for cell in nb.cells for o in cell.get('outputs', [])]
  assert any('text/html' in o.get('data', {}) and 'Meta-SGD' in o['data']['text/html']
             for o in outputs), 'no comparison table (DataFrame) in the outputs'
  assert any('image/png' in o.get('data', {}) for o in outputs), 'no convergence plot'
  assert 'TFF worker stopped.' in text
  _assert_no_worker_left(pid, marker)
  print(f'notebook ran in {elapsed:.1f} s')


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
def test_kernel_exit_stops_the_worker(monkeypatch, tmp_path):
  """Without the final worker.stop() cell, the kernel's exit must stop the worker."""
  marker = uuid.uuid4().hex
  nb = nbformat.read(NOTEBOOK, as_version=4)
  first = next(i for i, c in enumerate(nb.cells) if 'set_local_context()' in c.source
               and c.cell_type == 'code')
  nb.cells = nb.cells[:first + 1]   # install check, then data, model and the worker
  text = _execute(nb, marker, monkeypatch, tmp_path)
  pid = int(re.search(r'TFF worker pid (\d+)', text).group(1))
  _assert_no_worker_left(pid, marker)


def test_a_raising_cell_fails_the_run(monkeypatch, tmp_path):
  nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise ValueError('boom')")])
  with pytest.raises(pytest.fail.Exception, match='boom'):
    _execute(nb, uuid.uuid4().hex, monkeypatch, tmp_path)


def test_python_before_3_11_stops_at_the_first_cell(monkeypatch, tmp_path):
  """A kernel older than 3.11 (no tomllib to read run folders): one message, before any install."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nb.cells.insert(0, nbformat.v4.new_code_cell(
      "import sys\nsys.version_info = (3, 10, 13, 'final', 0)"))
  client = _client(nb, uuid.uuid4().hex, monkeypatch, tmp_path)
  with pytest.raises(nbclient.exceptions.CellExecutionError) as failed:
    client.execute()
  assert failed.value.ename == 'SystemExit', failed.value
  message = re.sub(r'\s+', ' ', failed.value.evalue)
  assert 'needs Python 3.11 or later, and this runtime has Python 3.10.13' in message, message
  assert 'Nothing was installed' in message, message
  _assert_stopped_at(nb, 'NEEDED_PYTHON = ')


def test_a_tff_meta_repo_that_is_neither_a_folder_nor_a_url_stops_the_set_up(
    monkeypatch, tmp_path):
  monkeypatch.setenv('TFF_META_REPO', str(tmp_path / 'no_such_checkout'))
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = _client(nb, uuid.uuid4().hex, monkeypatch, tmp_path)
  with pytest.raises(nbclient.exceptions.CellExecutionError) as failed:
    client.execute()
  assert failed.value.ename == 'SystemExit', failed.value
  assert failed.value.evalue.startswith(
      f"TFF_META_REPO is '{tmp_path / 'no_such_checkout'}': no such folder, and not a git URL"
  ), failed.value.evalue
  _assert_stopped_at(nb, 'def get_source')


def _assert_stopped_at(nb, text):
  """The cell holding `text` raised one plain message (no traceback), and no later cell ran."""
  at = next(i for i, c in enumerate(nb.cells) if text in c.source)
  error = next(o for o in nb.cells[at].outputs if o.output_type == 'error')
  assert 'most recent call last' not in '\n'.join(error.traceback), error.traceback
  assert nb.cells[at].execution_count is not None
  assert all(c.get('execution_count') is None and not c.get('outputs')
             for c in nb.cells[at + 1:] if c.cell_type == 'code')


# --- A Python 3.12 kernel (Colab's runtime): TFF runs in a Python 3.11 environment made by uv.

KERNEL_PACKAGES = ('ipykernel', 'pandas', 'matplotlib')


def _python_3_12():
  """(path, version) of a Python >= 3.12: $TFF_META_TEST_PYTHON312, python3.12/3.13, pyenv's."""
  found = [os.environ.get('TFF_META_TEST_PYTHON312'), shutil.which('python3.12'),
           shutil.which('python3.13')]
  found += sorted(glob.glob(os.path.expanduser('~/.pyenv/versions/3.1[2-9].*/bin/python3')))
  for python in filter(None, found):
    try:   # a pyenv shim exists even where it has no such version: ask the interpreter
      said = subprocess.run([python, '-c', 'import sys; print(*sys.version_info[:3], sep=".")'],
                            capture_output=True, text=True, timeout=60)
    except OSError:
      continue
    version = said.stdout.strip()
    if said.returncode == 0 and tuple(map(int, version.split('.')[:2])) >= (3, 12):
      return python, version
  return None, None


def _kernel_venv(python: str, version: str) -> str:
  """A venv of `python` with the kernel's packages, made once in the temp folder (locked)."""
  venv = os.path.join(tempfile.gettempdir(), f'tff_meta_test_kernel_py{version}')
  ready = os.path.join(venv, '.ready')
  check = [os.path.join(venv, 'bin', 'python'), '-c', 'import ' + ', '.join(KERNEL_PACKAGES)]
  with open(venv + '.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)   # another test process may be making it
    if not (os.path.isfile(ready) and subprocess.run(check, capture_output=True).returncode == 0):
      shutil.rmtree(venv, ignore_errors=True)
      subprocess.run([python, '-m', 'venv', venv], check=True)
      subprocess.run([os.path.join(venv, 'bin', 'python'), '-m', 'pip', 'install', '-q',
                      *KERNEL_PACKAGES], check=True)
      with open(ready, 'w') as f:
        f.write(version)
  return venv


@pytest.fixture(scope='module')
def py312_kernel(tmp_path_factory):
  """JUPYTER_PATH folder whose `python3` kernel is a Python 3.12 venv; its version."""
  python, version = _python_3_12()
  if python is None:
    pytest.skip('no Python 3.12 or later found (set TFF_META_TEST_PYTHON312)')
  venv = _kernel_venv(python, version)
  jupyter_path = tmp_path_factory.mktemp('jupyter')
  os.makedirs(jupyter_path / 'kernels' / 'python3')
  with open(jupyter_path / 'kernels' / 'python3' / 'kernel.json', 'w') as f:
    json.dump({'argv': [os.path.join(venv, 'bin', 'python'), '-m', 'ipykernel_launcher',
                        '-f', '{connection_file}'],
               'display_name': 'Python 3 (3.12 test kernel)', 'language': 'python'}, f)
  return str(jupyter_path), version


def _py312_client(nb, kernel, workdir, marker, monkeypatch):
  """Runs `nb` on the 3.12 kernel from `workdir` (outside the checkout), TFF_META_REPO = REPO."""
  jupyter_path, _ = kernel
  monkeypatch.setenv('JUPYTER_PATH', jupyter_path)
  monkeypatch.setenv('TFF_META_REPO', REPO)
  monkeypatch.setenv(MARKER, marker)
  assert not os.path.abspath(workdir).startswith(REPO + os.sep)
  return nbclient.NotebookClient(nb, kernel_name='python3', timeout=900, allow_errors=False,
                                 resources={'metadata': {'path': str(workdir)}})


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
def test_a_python_3_12_kernel_trains_in_python_3_11_and_shows_the_results(
    py312_kernel, monkeypatch, tmp_path):
  marker = uuid.uuid4().hex
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nb.cells.append(nbformat.v4.new_code_cell(   # what the table holds, and what this kernel loaded
      "print('TABLE', table.reset_index().to_json(orient='records'))\n"
      "print('TF', sorted(m for m in sys.modules if m.startswith('tensorflow')))\n"
      "python311_env(source)  # a second set-up finds the environment"))
  workdir = tmp_path / 'outside'
  workdir.mkdir()
  # As in Colab: uv is told to keep the kernel's packages' versions, which the lock does not.
  constraints = tmp_path / 'colab.constraints'
  constraints.write_text('tensorflow==2.19.0\nnumpy==2.0.2\n')
  monkeypatch.setenv('UV_CONSTRAINT', str(constraints))
  monkeypatch.setenv('UV_SYSTEM_PYTHON', 'true')
  # ... and the kernel's PYTHONPATH names modules for the kernel's Python only.
  kernel_only = tmp_path / 'kernel_only' / 'tensorflow_federated'
  kernel_only.mkdir(parents=True)
  (kernel_only / '__init__.py').write_text("raise ImportError('the kernel PYTHONPATH leaked')\n")
  monkeypatch.setenv('PYTHONPATH', str(kernel_only.parent))
  start = time.monotonic()
  try:
    _py312_client(nb, py312_kernel, workdir, marker, monkeypatch).execute()
  except nbclient.exceptions.CellExecutionError as e:
    pytest.fail(f'a notebook cell raised:\n{str(e)[-4000:]}')
  elapsed = time.monotonic() - start
  text = _stream_text(nb)
  version = py312_kernel[1]
  assert f'Python {version}: TFF 0.87 needs Python 3.9-3.11' in text, text
  env_python = os.path.join(workdir, 'tff_meta_py311', 'bin', 'python')
  assert f'TFF runs in {env_python}, with the project from {REPO}.' in text, text
  setup = float(re.search(r'Set-up took (\d+) s\.', text).group(1))
  # The environment uv made is a Python 3.11 with the lock's TFF (checked without importing TF).
  probe = subprocess.run([env_python, '-c', 'import sys, importlib.metadata as m; '
                          'print(sys.version_info[:2], m.version("tensorflow-federated"))'],
                         capture_output=True, text=True, check=True)
  assert probe.stdout.split() == ['(3,', '11)', '0.87.0'], probe.stdout
  # programs.compare ran there and left one run folder per method outside the checkout.
  runs = glob.glob(str(workdir / 'tff_meta_runs' / 'quickstart-*'))
  assert len(runs) == 1, runs
  table = json.loads(re.search(r'^TABLE (.*)$', text, re.MULTILINE).group(1))
  assert [row['method'] for row in table] == ['FedAvg', 'FedMeta(Meta-SGD)'], table
  for row, name in zip(table, ('fedavg', 'fedmeta_metasgd')):
    with open(os.path.join(runs[0], name, 'results.json')) as f:
      summary = json.load(f)['summary']
    assert row['accuracy (%)'] == round(summary['accuracy'], 2), (row, summary)
    assert 20.0 < row['accuracy (%)'] <= 100.0, row
    assert f"{row['method']}: {summary['accuracy']:.1f}% on test query sets" in text
  assert "TF []" in text, 'the notebook kernel imported TensorFlow'
  assert text.endswith(f'{workdir}/tff_meta_py311 has Python 3.11 and the lock; '
                       'nothing to install.\n'), text[-500:]
  outputs = [o for cell in nb.cells for o in cell.get('outputs', [])]
  assert any('text/html' in o.get('data', {}) and 'Meta-SGD' in o['data']['text/html']
             for o in outputs), 'no comparison table (DataFrame) in the outputs'
  assert any('image/png' in o.get('data', {}) for o in outputs), 'no convergence plot'
  assert not _marked_worker_pids(marker), 'a TFF worker started for the notebook still runs'
  print(f'notebook on Python {version} ran in {elapsed:.1f} s (set-up {setup:.0f} s)')


UV_CANNOT = {
    # Downloads off, and only uv-managed Pythons, of which there are none in the test's folder.
    'no_download': ({'UV_PYTHON_DOWNLOADS': 'never'},
                    ['error: No interpreter found for Python 3.11',
                     'hint: A managed Python download is available']),
    # The download fails (here: a mirror that refuses connections), as offline.
    'download_fails': ({'UV_PYTHON_INSTALL_MIRROR': 'http://127.0.0.1:9', 'UV_HTTP_RETRIES': '0'},
                       ['Failed to download', 'cause: Connection refused']),
}


@pytest.mark.slow
@pytest.mark.parametrize('case', sorted(UV_CANNOT))
def test_a_python_3_12_kernel_stops_with_one_message_when_uv_cannot_get_python_3_11(
    case, py312_kernel, monkeypatch, tmp_path):
  settings, said = UV_CANNOT[case]
  monkeypatch.setenv('UV_PYTHON_PREFERENCE', 'only-managed')
  monkeypatch.setenv('UV_PYTHON_INSTALL_DIR', str(tmp_path / 'no_pythons'))
  for key, value in settings.items():
    monkeypatch.setenv(key, value)
  nb = nbformat.read(NOTEBOOK, as_version=4)
  workdir = tmp_path / 'outside'
  workdir.mkdir()
  client = _py312_client(nb, py312_kernel, workdir, uuid.uuid4().hex, monkeypatch)
  # TFF_META_REPO as a git URL: a one-commit repository holding the lock, cloned offline.
  origin = tmp_path / 'origin'
  origin.mkdir()
  shutil.copy(os.path.join(REPO, 'requirements.txt'), origin)
  git = ['git', '-C', str(origin), '-c', 'user.name=t', '-c', 'user.email=t@t']
  for args in (['init', '-q'], ['add', 'requirements.txt'], ['commit', '-q', '-m', 'lock']):
    subprocess.run(git + args, check=True)
  monkeypatch.setenv('TFF_META_REPO', f'file://{origin}')
  with pytest.raises(nbclient.exceptions.CellExecutionError) as failed:
    client.execute()
  assert f'Cloning file://{origin} ...' in _stream_text(nb)
  assert os.path.isfile(workdir / 'tff_meta_src' / 'requirements.txt')
  assert failed.value.ename == 'SystemExit', failed.value
  message = re.sub(r'\s+', ' ', failed.value.evalue)
  assert message.startswith('uv could not get Python 3.11 (error: '), message
  for part in said:   # uv's own words, uncoloured
    assert part in message, (part, message)
  assert 'install Python 3.11, then run this cell again' in message, message
  _assert_stopped_at(nb, 'def python311_env')
  assert not os.path.exists(workdir / 'tff_meta_py311' / 'bin' / 'python')
