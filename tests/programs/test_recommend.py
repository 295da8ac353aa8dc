"""programs/train.py end to end on a generated ml-100k-format folder, and its errors."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.recommendation import ml100k_files
from tff_meta.core import provenance
from tff_meta.data.types import DataError
from tff_meta.program.errors import USER_ERRORS
from tff_meta.recommendation import config, experiment

assert DataError in USER_ERRORS

pytestmark = pytest.mark.slow   # runs programs as subprocesses

CONFIG = os.path.join(REPO, 'configs/recommend/movielens_p80.toml')
SMALL = ['--episodes=4', '--eval_every=2', '--checkpoint_every=2', '--inner_steps=2',
         '--self_steps=5', '--progress=false']


def _run(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'programs.train', *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=300)


def test_movielens_table3_layout(tmp_path):
  data = ml100k_files.write(tmp_path / 'ml', num_users=20, num_items=40)
  proc = _run('--config=configs/recommend/movielens_p20.toml', f'--data_path={data}',
              f'--output_dir={tmp_path / "out"}', '--methods=bias,svdpp_self,svdpp_global,nn_self,'
              'nn_pretrained,maml', *SMALL)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = proc.stdout
  # The config selects on validation users: the kept episode is a column.
  assert ('| setting | method | RMSE | Precision@1 | Precision@3 | Precision@10 | kept episode '
          '(lowest validation RMSE) |') in out
  for method in ('Bias baseline', 'SVD++(self)', 'SVD++(global)', 'NN(self)', 'NN(pre-trained)', 'MAML',
                 'Improvement (MAML vs NN(pre-trained))'):
    assert f'| 20% Support | {method} |' in out, method
  # One hidden layer of 32 on 40 items + 19 genres + 2 + 7 age groups + 5 occupations + 7 + 24 + 1,
  # plus the wide path (dim weights and the output bias) and the config's movie factors
  # (model = "rating_factor_mlp": 8 per movie, and the user vector of 8).
  dim = 40 + 19 + 2 + 7 + 5 + 7 + 24 + 1
  size = dim * 32 + 32 + 32 + dim + 1 + 40 * 8 + 8
  assert f'| MAML | {size} | {size} |' in out
  run = tmp_path / 'out'
  saved = json.loads((run / 'results.json').read_text())
  assert set(saved['curves']) == {'NN(pre-trained)', 'MAML'}
  assert re.fullmatch('[0-9a-f]{16}', saved['data_fingerprint'])   # the data, for reports
  assert [r['episode'] for r in saved['curves']['MAML']] == [0, 2, 4]
  for row in saved['rows']:
    assert 0 < row['rmse'] < 5 and 0 <= row['precision@1'] <= 1
  kept = {r['method']: r.get('selected_episode') for r in saved['rows']}
  assert kept['MAML'] in (0, 2, 4) and kept['NN(pre-trained)'] in (0, 2, 4)
  assert kept['Bias baseline'] is None and kept['NN(self)'] is None
  curve = saved['curves']['MAML']
  assert kept['MAML'] == min(curve, key=lambda r: r['rmse'])['episode']
  assert (run / 'curve.png').exists() and (run / 'maml' / 'checkpoints').exists()
  assert [r['code_version'] for r in provenance.read(str(run))] == [provenance.code_version()]


def test_missing_movielens_folder_is_a_clear_error(tmp_path):
  # In-process (the program prints USER_ERRORS such as DataError without a traceback).
  cfg = config.load(CONFIG, {'output_dir': str(tmp_path)})
  with pytest.raises(DataError, match=r'needs data_path \(flag --data_path\): the unzipped '
                     'ml-100k folder'):
    experiment.run(cfg, show_progress=False)
  with pytest.raises(DataError, match='u.data'):
    experiment.run(config.load(CONFIG,
                               {'output_dir': str(tmp_path), 'data_path': str(tmp_path)}),
                   show_progress=False)
