"""Shared fixtures: one project-owned TFF worker for the session, stopped by PID."""

import os
import subprocess

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from tff_meta.runtime import contexts, workers  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, 'tests', 'fixtures')   # small real data (tests/fixtures/README.md)


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
