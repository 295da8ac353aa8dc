"""programs.train run again into its folder: finished methods are read back, and a stopped
test phase resumes after its saved episodes.

The runs read the FEMNIST fixture with test_program.py's small episodes.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import FIXTURES, REPO
from tests.fewround.fixtures import PROGRAM_CONFIG as CONFIG
from tests.fewround.fixtures import run_program as _run
from tff_meta.fewround import experiment


@pytest.mark.slow
def test_a_rerun_reads_finished_methods_back_and_tests_only_the_rest(tmp_path):
  common = [f'--config={CONFIG}', '--test_episodes=2', '--test_rounds=1', '--examples_per_class=6',
            '--num_clients=3', '--episodes=2', f'--data_path={os.path.join(FIXTURES, "tff")}',
            f'--output_dir={tmp_path / "run"}']
  proc = _run(*common, '--methods=fedavg')   # as if stopped after its first method
  assert proc.returncode == 0, proc.stderr[-2000:]
  first = json.loads((tmp_path / 'run' / 'results.json').read_text())['results']
  proc = _run(*common, '--methods=fedavg,finetune_fedavg')
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'fedavg: tested already' in proc.stdout and 'finetune_fedavg: tested already' not in proc.stdout
  rows = json.loads((tmp_path / 'run' / 'results.json').read_text())['results']
  assert [r['method'] for r in rows] == ['fedavg', 'finetune_fedavg'] and rows[0] == first[0]
  # Another configuration tests again (here: more test episodes).
  proc = _run(*common[:1], '--test_episodes=3', *common[2:], '--methods=fedavg')
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'tested already' not in proc.stdout
  again = json.loads((tmp_path / 'run' / 'results.json').read_text())['results'][0]
  assert again['accuracy']['1']['episodes'] == 3
  assert again['accuracy']['1']['per_episode'][:2] == first[0]['accuracy']['1']['per_episode']


@pytest.mark.slow
def test_a_stopped_test_phase_resumes_after_its_saved_episodes(tmp_path):
  """A run stopped during a method's test keeps the episodes saved so far (every
  deploy.SAVE_EVERY) and its rerun plays only the rest; deploy's tests show the numbers
  equal an uninterrupted test's, and the reruns tests above that episode i is the same."""
  common = [f'--config={CONFIG}', '--methods=fedavg', '--test_episodes=20', '--test_rounds=1,2',
            '--examples_per_class=6', '--num_clients=3',
            f'--data_path={os.path.join(FIXTURES, "tff")}']
  out = tmp_path / 'stopped'
  progress = out / experiment.TEST_PROGRESS_DIR / 'fedavg.json'
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  log = tmp_path / 'stopped.log'             # a file, not a pipe: TF's logging would fill one
  with open(log, 'w') as f:
    run = subprocess.Popen([sys.executable, '-m', 'programs.train', '--progress=false',
                            *common, f'--output_dir={out}'], cwd=REPO, env=env, stdout=f,
                           stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while not progress.exists() and run.poll() is None and time.time() < deadline:
      time.sleep(0.02)
    run.send_signal(signal.SIGTERM)            # stopped during the test phase
    run.wait(timeout=120)
  assert run.returncode == 143, log.read_text()[-2000:]
  saved = json.loads(progress.read_text())['accuracy']
  assert len(saved['1']) == 10 and not (out / 'results.json').exists()
  proc = _run(*common, f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'resuming after test episode 10 of 20' in proc.stdout
  row = json.loads((out / 'results.json').read_text())['results'][0]
  for r in ('1', '2'):
    assert row['accuracy'][r]['episodes'] == 20
    assert row['accuracy'][r]['per_episode'][:10] == saved[r]
  assert not progress.exists()                 # removed once the row is written
