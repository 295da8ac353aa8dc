"""Shared fixtures: one project-owned TFF worker for the session, stopped by PID."""

import os
import subprocess

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

import pytest  # noqa: E402
import tensorflow_federated as tff  # noqa: E402
from tensorflow_federated.python.simulation.datasets import download  # noqa: E402

from tests import offline  # noqa: E402
from tff_meta.runtime import contexts, workers  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES_SOURCE = os.path.join(REPO, 'tests', 'fixtures')   # small real data (its README.md)


def _expanded_fixtures(source: str = FIXTURES_SOURCE) -> str:
  """The fixture folder with every `*.gz` file expanded, built once per content in the temp dir.

  FEMNIST is stored as tff/emnist_all.sqlite.gz; TFF's loaders read the plain sqlite file.
  The folder is named after the compressed files' digest and built atomically (rename).
  """
  import gzip
  import hashlib
  import shutil
  import tempfile
  packed = sorted(os.path.relpath(os.path.join(d, f), source)
                  for d, _, files in os.walk(source) for f in files if f.endswith('.gz'))
  digest = hashlib.sha256()
  for rel in packed:
    with open(os.path.join(source, rel), 'rb') as f:
      digest.update(rel.encode() + f.read())
  target = os.path.join(tempfile.gettempdir(), f'tff_meta_fixtures_{digest.hexdigest()[:16]}')
  if os.path.isdir(target):
    return target
  staging = tempfile.mkdtemp(prefix='tff_meta_fixtures_', dir=tempfile.gettempdir())
  for name in ('tff', 'leaf'):
    shutil.copytree(os.path.join(source, name), os.path.join(staging, name))
  for rel in packed:
    with gzip.open(os.path.join(staging, rel), 'rb') as src, \
        open(os.path.join(staging, rel[:-3]), 'wb') as dst:
      shutil.copyfileobj(src, dst)
    os.remove(os.path.join(staging, rel))
  try:
    os.rename(staging, target)
  except OSError:   # another test process built it first
    shutil.rmtree(staging, ignore_errors=True)
  return target


FIXTURES = _expanded_fixtures()
TFF_GET_COMPRESSED_FILE = download.get_compressed_file   # TFF's download helper, as it is


@pytest.fixture(autouse=True)
def _no_tff_downloads(monkeypatch):
  """Tests read tests/fixtures only: a test that would fetch a TFF file fails."""
  monkeypatch.setattr(download, 'get_compressed_file',
                      offline.tff_downloads_refused(TFF_GET_COMPRESSED_FILE, AssertionError))


@pytest.fixture(scope='session')
def tff_worker():
  worker = workers.WorkerProcess()
  tff.framework.set_default_context(contexts.sync_context_for(worker))
  yield worker
  worker.stop()
  assert subprocess.run(['kill', '-0', str(worker.pid)], capture_output=True).returncode != 0


@pytest.fixture
def tff_context(tff_worker):
  tff.framework.set_default_context(contexts.sync_context_for(tff_worker))
  return tff_worker


def pytest_sessionfinish(session, exitstatus):
  """No TFF worker this test run started may outlive it."""
  workers.stop_all_workers()
  mine = subprocess.run(['pgrep', '-P', str(os.getpid()), '-f', 'worker_binary'],
                        capture_output=True, text=True).stdout.split()
  if mine:
    session.exitstatus = 1
    print(f'\nERROR: TFF worker_binary processes left running: {mine}')
