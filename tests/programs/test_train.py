"""programs/train.py end to end on the embedded data: outputs, kill-and-resume, bad input."""

import csv
import json
import subprocess
import sys

import pytest

from tests import helpers
from tests.conftest import REPO
from tests.helpers import csv_rounds as _rounds
from tests.helpers import program_env as _env
from tff_meta.core import provenance

pytestmark = pytest.mark.slow   # runs programs as subprocesses

ARGS = ['--config=configs/demo/digits.toml', '--algorithm=fedmeta_maml', '--rounds=40',
        '--eval_every=10', '--checkpoint_every=5', '--progress=false', '--clients_per_round=3']


def _cmd(out, *extra):
  return [sys.executable, '-m', 'programs.train', *ARGS, f'--output_dir={out}', *extra]


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  out = tmp_path_factory.mktemp('full')
  proc = subprocess.run(_cmd(out), cwd=REPO, env=_env(), capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return out, proc


def test_outputs(uninterrupted):
  out, proc = uninterrupted
  assert 'FedMeta(MAML)' in proc.stdout and '| Method |' in proc.stdout
  for name in ('metrics.csv', 'eval.csv', 'results.json', 'config.toml', 'tensorboard',
               'checkpoints'):
    assert (out / name).exists(), name
  assert _rounds(out / 'metrics.csv') == list(range(1, 41))
  assert _rounds(out / 'eval.csv') == [0, 10, 20, 30, 40]
  summary = json.loads((out / 'results.json').read_text())['summary']
  assert 0.0 <= summary['accuracy'] <= 100.0 and summary['rounds'] == 40
  # Cost accounting: per-round bytes and client FLOPs, and the run's total GFLOPs.
  with open(out / 'metrics.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  assert all(float(r['client_flops']) > 0 and int(r['bytes_up']) > 0 for r in rows)
  # the local worker's memory after every round and evaluation (a leak shows as a trend)
  assert all(float(r['worker_rss_mb']) > 10 for r in rows)
  with open(out / 'eval.csv', newline='') as f:
    assert all(float(r['worker_rss_mb']) > 10 for r in csv.DictReader(f))
  total = sum(float(r['client_flops']) for r in rows)
  assert summary['gflops'] == pytest.approx(total / 1e9, rel=1e-9)


def test_killed_run_resumes_where_it_stopped(tmp_path, uninterrupted):
  full_out, _ = uninterrupted
  out = tmp_path / 'resumed'
  workers = helpers.kill_run_at_checkpoint(_cmd(out), out, 15, worker_exit_s=1.0)
  assert workers, 'the run should have had its own TFF worker'
  killed_at = max(_rounds(out / 'metrics.csv'))
  assert killed_at < 40

  resumed = subprocess.run(_cmd(out), cwd=REPO, env=_env(), capture_output=True, text=True,
                           timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'Resuming FedMeta(MAML) from round' in resumed.stderr
  assert _rounds(out / 'metrics.csv') == list(range(1, 41))     # no gaps, no duplicates
  assert _rounds(out / 'eval.csv') == [0, 10, 20, 30, 40]
  # Same seed-driven client sampling: the resumed run ends exactly where the uninterrupted one did.
  want = json.loads((full_out / 'results.json').read_text())
  got = json.loads((out / 'results.json').read_text())
  assert got['test_client_accuracies'] == want['test_client_accuracies']
  assert got['summary']['accuracy'] == want['summary']['accuracy']
  assert got['summary']['gflops'] == pytest.approx(want['summary']['gflops'])  # all sessions
  # provenance.csv: one row per start, the second one resumed after the killed run's checkpoint
  starts = provenance.read(str(out))
  assert len(starts) == 2 and starts[0]['start'] == '0'
  assert 15 <= int(starts[1]['start']) <= killed_at and int(starts[1]['start']) % 5 == 0
  assert all(r['code_version'] == provenance.code_version() for r in starts)
  assert 'train' in starts[0]['command'] and f'--output_dir={out}' in starts[0]['command']


@pytest.mark.parametrize('extra, message', [
    (['--algorithm=fedmaml'], "Unknown algorithm 'fedmaml'"),
    (['--support_fraction=1.5'], 'support_fraction must be in (0, 1)'),
    (['--dataset=emnist', '--model=femnist_cnn', '--cache_dir=/nonexistent/tff',
      '--no_download'],
     '/nonexistent/tff/emnist_all.sqlite'),
])
def test_bad_input_gets_a_clear_error(tmp_path, extra, message):
  proc = subprocess.run(_cmd(tmp_path / 'bad', *extra), cwd=REPO, env=_env(),
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0
  assert message in proc.stderr
  assert 'Traceback' not in proc.stderr


def test_incompatible_checkpoint_is_named(tmp_path, uninterrupted):
  full_out, _ = uninterrupted
  out = tmp_path / 'other'
  subprocess.run(['cp', '-r', str(full_out), str(out)], check=True)
  proc = subprocess.run(_cmd(out, '--algorithm=fedmeta_metasgd', '--rounds=45'), cwd=REPO,
                        env=_env(), capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0
  # The saved config.toml names the other algorithm; the state's own check (its structure
  # and shapes) is tested in test_user_errors.py.
  assert "holds a run with other settings, which change what it computes: algorithm: " \
      "'fedmeta_maml' -> 'fedmeta_metasgd'" in proc.stderr
  assert 'Traceback' not in proc.stderr


def test_diverging_run_stops_with_a_clear_error(tmp_path):
  out = tmp_path / 'nan'
  proc = subprocess.run(_cmd(out, '--inner_lr=1e30', '--rounds=12'), cwd=REPO, env=_env(),
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0
  assert 'every client update was non-finite for 5 rounds' in proc.stderr
  assert 'Lower the learning rates' in proc.stderr and 'Traceback' not in proc.stderr
  # What was written before stays: the metrics of the rounds that ran.
  assert _rounds(out / 'metrics.csv') == [1, 2, 3, 4]
