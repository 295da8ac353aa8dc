"""notebooks/quickstart.ipynb runs top to bottom, and leaves no TFF worker behind.

The notebook is executed with nbclient on the `python3` kernel of this
interpreter (ipykernel from requirements.txt), from the notebooks/ folder, as
a user would run it locally: its install cell must find the checkout and
install nothing. A cell that raises fails the test.
"""

import os
import re
import sys
import time
import uuid

import ipykernel.kernelspec  # the notebook's python3 kernel, which nbclient starts
import nbclient
import nbformat
import pytest

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


def test_the_notebook_is_valid():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  assert nb.metadata.kernelspec.name == 'python3'
  assert not any(cell.get('outputs') for cell in nb.cells if cell.cell_type == 'code'), (
      'commit the notebook without outputs')
  source = '\n'.join(cell.source for cell in nb.cells)
  assert 'pip install -q --no-deps -r' in source and 'git+{REPO_URL}' in source


def _execute(nb, marker, monkeypatch, tmp_path):
  """Runs `nb` on this interpreter's python3 kernel from notebooks/; fails on a raising cell."""
  # A `python3` kernel spec for sys.executable, first on the Jupyter path, so that
  # no user-level `python3` kernel of another interpreter is picked up.
  os.makedirs(tmp_path / 'kernels', exist_ok=True)
  ipykernel.kernelspec.write_kernel_spec(tmp_path / 'kernels' / 'python3')
  monkeypatch.setenv('JUPYTER_PATH', str(tmp_path))
  # Inherited by the kernel and by the workers it starts: identifies them in /proc.
  monkeypatch.setenv(MARKER, marker)
  monkeypatch.setenv('TF_CPP_MIN_LOG_LEVEL', '2')
  client = nbclient.NotebookClient(
      nb, kernel_name='python3', timeout=300, allow_errors=False,
      resources={'metadata': {'path': os.path.join(REPO, 'notebooks')}})
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
