"""Client state through programs/train.py: stored per client, checkpointed, resumed exactly."""

import json
import subprocess
import sys

import pytest

from tests import helpers
from tests.conftest import REPO
from tests.helpers import csv_rounds as _rounds
from tests.helpers import program_env as _env

pytestmark = pytest.mark.slow   # runs programs as subprocesses

ARGS = ['--config=configs/report003/digits.toml', '--algorithm=fedper', '--rounds=12',
        '--eval_every=4', '--checkpoint_every=4', '--progress=false']


def _cmd(out):
  return [sys.executable, '-m', 'programs.train', *ARGS, f'--output_dir={out}']


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  out = tmp_path_factory.mktemp('stateful_full')
  proc = subprocess.run(_cmd(out), cwd=REPO, env=_env(), capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  (out / 'stdout.txt').write_text(proc.stdout)
  return out


def test_known_and_new_clients_are_scored(uninterrupted):
  header = (uninterrupted / 'eval.csv').read_text().splitlines()[0].split(',')
  assert {'test_accuracy', 'known_accuracy', 'known_client_std'} <= set(header)
  ids = (uninterrupted / 'client_states' / 'ids.txt').read_text().split()
  assert 0 < len(ids) <= 40 and len(set(ids)) == len(ids)   # only training clients, once each


def test_summary_reports_the_known_clients_final_score(uninterrupted):
  # report 003 Sec. 6.3 scores known clients: the summary row and table carry it
  results = json.loads((uninterrupted / 'results.json').read_text())
  last = max(results['history'], key=lambda row: row['round'])
  assert last['round'] == 12
  assert results['summary']['known_accuracy'] == pytest.approx(100 * last['known_accuracy'])
  assert results['summary']['accuracy'] == pytest.approx(100 * last['test_accuracy'])
  table = (uninterrupted / 'stdout.txt').read_text()   # programs.train prints the summary table
  assert 'Known clients % (held-out local data)' in table
  assert f"{results['summary']['known_accuracy']:.2f}" in table


def test_killed_stateful_run_resumes_with_every_clients_state(tmp_path, uninterrupted):
  out = tmp_path / 'resumed'
  helpers.kill_run_at_checkpoint(_cmd(out), out, 4, worker_exit_s=30)
  assert max(_rounds(out / 'metrics.csv')) < 12
  resumed = subprocess.run(_cmd(out), cwd=REPO, env=_env(), capture_output=True, text=True,
                           timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'Resuming FedPer from round' in resumed.stderr
  assert _rounds(out / 'metrics.csv') == list(range(1, 13))
  want = json.loads((uninterrupted / 'results.json').read_text())
  got = json.loads((out / 'results.json').read_text())
  # known clients' personal layers included; the worker's memory is a measurement, not a result
  scores = lambda h: [{k: v for k, v in row.items() if k != 'worker_rss_mb'} for row in h]
  assert scores(got['history']) == scores(want['history'])
  assert all(row['worker_rss_mb'] > 0 for row in got['history'])
  assert got['test_client_accuracies'] == want['test_client_accuracies']
