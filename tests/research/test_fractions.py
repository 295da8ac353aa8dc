"""Fig. 3's sweep (`recommendation.fractions`, `research.recommend_fractions`): one MAML run per
training support fraction and one reference run, resumable, with a one-line error on bad input."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.recommendation import ml100k_files
from tff_meta.recommendation import config, experiment
from research.recommend_fractions import fractions

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
P80 = os.path.join(REPO, 'configs', 'recommend', 'movielens_p80.toml')


def _cfg(folder, out):
  return config.load(P80, dict(data_path=str(folder), output_dir=str(out), episodes=2,
                               eval_every=1, checkpoint_every=1, hidden_units=4, inner_steps=2))


@pytest.mark.slow
def test_one_maml_run_per_fraction_and_a_resumed_sweep_reads_them_back(tmp_path, monkeypatch):
  folder = tmp_path / 'ml'
  ml100k_files.write(folder, num_users=25, num_items=50)
  out = tmp_path / 'fig3'
  rows = fractions.run(_cfg(folder, out), [0.3, 0.6], show_progress=False)
  assert [r['fraction'] for r in rows] == [0.3, 0.6]
  saved = pd.read_csv(out / fractions.CSV_FILE)
  assert saved['fraction'].tolist() == [0.3, 0.6]
  for r, f in zip(rows, ('fraction_0.3', 'fraction_0.6')):
    run = json.loads((out / f / 'results.json').read_text())
    assert [x['method'] for x in run['rows']] == ['MAML']
    assert run['rows'][0]['rmse'] == pytest.approx(r['rmse'])
    assert 'train_support_fraction = 0.3' in (out / 'fraction_0.3' / 'config.toml').read_text()
  reference = json.loads((out / fractions.REFERENCE / 'results.json').read_text())
  assert [x['method'] for x in reference['rows']] == ['Bias baseline', 'NN(pre-trained)']
  assert (out / fractions.PLOT_FILE).stat().st_size > 0
  # The 0.3 and 0.6 runs differ only in the training users' split, so their MAML scores differ.
  assert rows[0]['rmse'] != rows[1]['rmse']

  def no_training(*args, **kwargs):
    raise AssertionError('a finished run was trained again')
  monkeypatch.setattr(experiment, 'run', no_training)
  again = fractions.run(_cfg(folder, out), [0.3, 0.6], show_progress=False)
  assert again == rows
  other = config.load(P80, dict(data_path=str(folder), output_dir=str(out), episodes=3,
                                eval_every=1, checkpoint_every=1, hidden_units=4, inner_steps=2))
  with pytest.raises(config.ConfigError, match='finished run with other settings'):
    fractions.run(other, [0.3, 0.6], show_progress=False)


@pytest.mark.slow
def test_bad_fractions_and_tasks_are_refused(tmp_path):
  cfg = _cfg(tmp_path, tmp_path / 'x')
  with pytest.raises(config.ConfigError, match='at least one fraction'):
    fractions.validate(cfg, [])
  with pytest.raises(ValueError, match='train_support_fraction'):
    fractions.validate(cfg, [0.2, 1.0])
  with pytest.raises(config.ConfigError, match='movielens'):
    fractions.validate(config.RecommendConfig(task='service'), [0.2])
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  out = subprocess.run([sys.executable, '-m', 'research.recommend_fractions', f'--config={P80}',
                        f'--data_path={tmp_path}', '--fractions=0.2,abc'],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1
  assert out.stderr.strip().splitlines()[-1].startswith('error: --fractions must be numbers')
  assert len(out.stderr.strip().splitlines()) == 1
