"""programs/few_round.py end to end (FEMNIST-62, one cheap method) and its input errors."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, SHARED_DATA
from tff_meta.fewround import baselines
from tff_meta.fewround import config as config_lib
from tff_meta.program.config import ConfigError
from tff_meta.registry import UnknownNameError

CONFIG = 'configs/fewround/femnist62_5way_iid.toml'


def _run(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'programs.few_round', '--progress=false', *args],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_runs_and_writes_results(tmp_path):
  out = tmp_path / 'run'
  proc = _run(f'--config={CONFIG}', '--methods=fedavg', '--test_episodes=2',
              '--test_rounds=1,2', '--examples_per_class=20', '--num_clients=4',
              f'--data_path={os.path.join(SHARED_DATA, "tff")}', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  results = json.loads((out / 'results.json').read_text())['results']
  assert [r['method'] for r in results] == ['fedavg']
  accuracy = results[0]['accuracy']
  assert set(accuracy) == {'1', '2'} and all(a['episodes'] == 2 for a in accuracy.values())
  assert all(0.0 <= a['mean'] <= 1.0 for a in accuracy.values())
  assert '| fedavg |' in (out / 'results.md').read_text()


def test_bad_input_gives_clear_errors(tmp_path):
  proc = _run('--config=configs/fewround/mini_imagenet_5way_iid.toml',
              f'--data_path={tmp_path / "absent"}', f'--output_dir={tmp_path}')
  assert proc.returncode != 0 and 'miniImageNet folder' in proc.stderr
  assert '--data_path' in proc.stderr and 'Traceback' not in proc.stderr


def test_config_errors_name_the_key():
  with pytest.raises(UnknownNameError, match="Unknown few-round method 'frl_magic'"):
    baselines.METHODS.get('frl_magic')
  with pytest.raises(ConfigError, match='n_way must be'):
    config_lib.load(os.path.join(REPO, CONFIG), {'n_way': '7,3'}).validate()
  with pytest.raises(ConfigError, match="Unknown config key"):
    config_lib.load(os.path.join(REPO, CONFIG), {'rounds_per_episode': 3})
  cfg = config_lib.load(os.path.join(REPO, CONFIG), {'test_rounds': '1,2', 'n_way': '3,7'})
  assert cfg.test_rounds == (1, 2) and cfg.ways == 7 and cfg.n_way_arg == (3, 7)
