"""programs.train and programs.sweep choosing on validation classes: a sweep's grid, and the
checkpoint a run deploys (select_every).

The runs read the FEMNIST fixture with test_program.py's small episodes.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, REPO
from tests.fewround.fixtures import PROGRAM_CONFIG as CONFIG
from tests.fewround.fixtures import run_program as _run
from tff_meta.core.config_file import ConfigError
from tff_meta.fewround import config as config_lib


@pytest.mark.slow
def test_sweep_scores_every_combination_on_validation_classes(tmp_path):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  out = tmp_path / 'sweep'
  proc = subprocess.run(
      [sys.executable, '-m', 'programs.sweep', '--progress=false',
       f'--config={CONFIG}', '--methods=fedavg', '--test_episodes=2', '--test_rounds=1',
       '--examples_per_class=6', '--num_clients=3', '--grid=inner_lr=0.003,0.03',
       f'--data_path={os.path.join(FIXTURES, "tff")}', f'--output_dir={out}'],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  sweep = json.loads((out / 'sweep.json').read_text())
  assert [r['label'] for r in sweep['results']] == ['inner_lr=0.003', 'inner_lr=0.03']
  for folder in ('inner_lr_0.003', 'inner_lr_0.03'):
    config = json.loads((out / folder / 'results.json').read_text())['config']
    assert 'eval_part = "validation"' in config
  assert (out / 'sweep.md').read_text().count('**') == 2      # one best setting, in bold


@pytest.mark.slow
def test_sweep_rejects_a_bad_grid(tmp_path):
  proc = subprocess.run(
      [sys.executable, '-m', 'programs.sweep', f'--config={CONFIG}',
       '--grid=learning_rate=0.1', f'--output_dir={tmp_path}'],
      cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'), capture_output=True, text=True,
      timeout=300)
  assert proc.returncode != 0 and "'learning_rate' is not a sweepable" in proc.stderr
  assert 'Traceback' not in proc.stderr


@pytest.mark.slow
def test_select_every_deploys_the_validation_best_checkpoint(tmp_path):
  common = [f'--config={CONFIG}', '--methods=frl_distance', '--test_episodes=2',
            '--test_rounds=1', '--examples_per_class=6', '--num_clients=3', '--checkpoint_every=1',
            f'--data_path={os.path.join(FIXTURES, "tff")}']
  out = tmp_path / 'selected'
  proc = _run(*common[:1], '--methods=frl_distance,finetune_fedavg', *common[2:], '--episodes=2',
              '--select_every=1', '--select_episodes=2', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  frl, finetune = json.loads((out / 'results.json').read_text())['results']
  curve = frl['info']['validation_curve']
  assert sorted(curve, key=int) == ['1', '2']
  best = max(curve, key=lambda v: (curve[v], -int(v)))
  assert frl['info']['selected_episode'] == int(best)
  assert frl['info']['selection_validation_accuracy'] == curve[best]
  with open(out / 'frl_distance' / 'selection_2.csv') as f:
    assert f.read().splitlines()[0] == 'version,validation_accuracy'
  assert sorted(finetune['info']['validation_curve'], key=int) == ['4', '8']   # (R + 1) * 1
  # The deployed phi is the chosen checkpoint's: a run that stops there tests the same.
  plain = tmp_path / 'plain'
  proc = _run(*common, f'--episodes={best}', f'--output_dir={plain}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  again = json.loads((plain / 'results.json').read_text())['results'][0]
  assert again['accuracy']['1']['per_episode'] == frl['accuracy']['1']['per_episode']
  # A rerun reads the scores back and chooses the same (another test length, so the
  # method is prepared and tested again rather than read from results.json). The plain run and
  # the rerun leave out finetune_fedavg, which the checks after the first run do not look at.
  proc = _run(*common[:2], '--test_episodes=3', *common[3:], '--episodes=2', '--select_every=1',
              '--select_episodes=2', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'tested already' not in proc.stdout
  assert json.loads((out / 'results.json').read_text())['results'][0]['info'] == frl['info']


def test_select_every_must_be_a_multiple_of_checkpoint_every():
  with pytest.raises(ConfigError, match='select_every must be 0 or a multiple of '
                     'checkpoint_every \\(50\\), got 30'):
    config_lib.load(os.path.join(REPO, CONFIG), {'select_every': 30}).validate()
