"""notebooks/quickstart.ipynb runs top to bottom, and leaves no TFF worker behind.

The notebook is executed with nbclient on the `python3` kernel of this
interpreter (ipykernel from requirements.txt), from the notebooks/ folder, as
a user would run it locally: its install cell must find the checkout and
install nothing. A cell that raises fails the test.
"""

import importlib.metadata
import os
import re
import sys
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
  # Nothing runs before the check: no pip, no subprocess, no shell or magic line.
  assert not re.search(r'pip|subprocess|^\s*[!%]', first.source, re.MULTILINE), first.source
  assert sum('REPO_URL = ' in cell.source for cell in nb.cells) == 1, 'REPO_URL is set once'
  # Only TFF's pins and this package go in, never the whole lock over Colab's packages.
  assert "f'{clone}[colab]'" in install.source
  assert re.search(r"'--no-deps',\s*f'tensorflow-federated==\{TFF_VERSION\}'", install.source)
  assert 'requirements.txt' not in install.source


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


def test_python_3_12_stops_at_the_first_cell_with_what_to_do(monkeypatch, tmp_path):
  """Colab's default Python 3.12: the first code cell stops the run before any install."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nb.cells.insert(0, nbformat.v4.new_code_cell(
      "import sys\nsys.version_info = (3, 12, 1, 'final', 0)  # as in Colab's default runtime"))
  client = _client(nb, uuid.uuid4().hex, monkeypatch, tmp_path)
  with pytest.raises(nbclient.exceptions.CellExecutionError) as failed:
    client.execute()
  assert failed.value.ename == 'SystemExit', failed.value
  message = re.sub(r'\s+', ' ', failed.value.evalue)
  assert 'this runtime has Python 3.12.1' in message, message
  for advice in ('Nothing was installed', 'local Jupyter with Python 3.11',
                 'a runtime with Python 3.11 if Colab offers one'):
    assert advice in message, (advice, message)
  check = next(i for i, c in enumerate(nb.cells) if 'NEEDED_PYTHON' in c.source)
  # One plain message, not a traceback.
  error = next(o for o in nb.cells[check].outputs if o.output_type == 'error')
  assert 'most recent call last' not in '\n'.join(error.traceback), error.traceback
  # The run stopped there: no later cell ran (no install, no worker, no traceback pile).
  assert nb.cells[check].execution_count is not None
  assert all(c.get('execution_count') is None and not c.get('outputs')
             for c in nb.cells[check + 1:] if c.cell_type == 'code')
