"""Client state through programs/train.py: stored per client, checkpointed, resumed exactly."""

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.helpers import csv_rounds as _rounds
from tests.helpers import program_env as _env
from tests.helpers import workers_of as _workers_of

ARGS = ['--config=configs/report003/digits.toml', '--algorithm=fedper', '--rounds=12',
        '--eval_every=4', '--checkpoint_every=4', '--progress=false']


def _alive(pid):
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except (FileNotFoundError, ProcessLookupError):
    return False


def _cmd(out):
  return [sys.executable, '-m', 'programs.train', *ARGS, f'--output_dir={out}']


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  out = tmp_path_factory.mktemp('stateful_full')
  proc = subprocess.run(_cmd(out), cwd=REPO, env=_env(), capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return out


def test_known_and_new_clients_are_scored(uninterrupted):
  header = (uninterrupted / 'eval.csv').read_text().splitlines()[0].split(',')
  assert {'test_accuracy', 'known_accuracy', 'known_client_std'} <= set(header)
  ids = (uninterrupted / 'client_states' / 'ids.txt').read_text().split()
  assert 0 < len(ids) <= 40 and len(set(ids)) == len(ids)   # only training clients, once each


def test_killed_stateful_run_resumes_with_every_clients_state(tmp_path, uninterrupted):
  out = tmp_path / 'resumed'
  proc = subprocess.Popen(_cmd(out), cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  deadline = time.time() + 240
  while not (out / 'checkpoints' / 'program_state_4').exists():
    assert proc.poll() is None, 'run ended before it could be killed'
    assert time.time() < deadline, 'no checkpoint for round 4 appeared'
    time.sleep(0.02)
  workers = _workers_of(proc.pid)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  deadline = time.time() + 30   # its worker exits on the parent's death (PDEATHSIG)
  while any(_alive(p) for p in workers):
    assert time.time() < deadline, 'the killed run\'s worker survived'
    time.sleep(0.1)
  assert max(_rounds(out / 'metrics.csv')) < 12
  resumed = subprocess.run(_cmd(out), cwd=REPO, env=_env(), capture_output=True, text=True,
                           timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'Resuming FedPer from round' in resumed.stderr
  assert _rounds(out / 'metrics.csv') == list(range(1, 13))
  want = json.loads((uninterrupted / 'results.json').read_text())
  got = json.loads((out / 'results.json').read_text())
  assert got['history'] == want['history']   # known clients' personal layers included
  assert got['test_client_accuracies'] == want['test_client_accuracies']
