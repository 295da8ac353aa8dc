"""programs.compare, reproduce and evaluate serve classification only: given another task's
config or run folder, each refuses in one line naming the tasks it supports (issue 67), before
anything is written."""
import os
import shutil

import pytest

from tests.conftest import REPO
from tests.programs.program_client import Runner, assert_clean_error, snapshot

pytestmark = pytest.mark.slow   # runs programs as subprocesses

FEWROUND = os.path.join(REPO, 'configs/fewround/femnist62_5way_iid.toml')
RECOMMEND = os.path.join(REPO, 'configs/recommend/movielens_p20.toml')


@pytest.fixture(scope='module')
def runner():
  r = Runner()
  yield r
  r.close()


@pytest.mark.parametrize('config, task', [(FEWROUND, 'fewround'), (RECOMMEND, 'recommendation')])
def test_compare_refuses_another_tasks_config(runner, tmp_path, config, task):
  before = snapshot(tmp_path)
  proc = runner.run('programs.compare', f'--config={config}', f'--output_dir={tmp_path}/o')
  assert_clean_error(proc, f'error: programs.compare supports classification; {task} is not one '
                     'of them', before)
  assert not os.path.exists(tmp_path / 'o')


def test_reproduce_refuses_a_cell_of_another_task(runner, tmp_path):
  shutil.copy(os.path.join(REPO, 'configs/fedmeta/paper_table2.toml'), tmp_path)
  shutil.copy(FEWROUND, tmp_path / 'table2_femnist_p20_maml.toml')
  before = snapshot(tmp_path)
  proc = runner.run('programs.reproduce', f'--config_dir={tmp_path}', '--datasets=femnist',
                    '--supports=20', '--methods=maml', f'--output_root={tmp_path}/o')
  assert_clean_error(proc, 'error: programs.reproduce supports classification; fewround is not '
                     'one of them', before)


def test_evaluate_refuses_a_run_of_another_task(runner, tmp_path):
  run = tmp_path / 'run'
  run.mkdir()
  shutil.copy(RECOMMEND, run / 'config.toml')
  before = snapshot(tmp_path)
  proc = runner.run('programs.evaluate', f'--run_dir={run}')
  assert_clean_error(proc, 'error: programs.evaluate supports classification; recommendation is '
                     'not one of them', before)
