"""programs/train.py end to end (FEMNIST-62, one cheap method) and its input errors.

The runs read the 12-writer FEMNIST fixture (tests/fixtures/tff: 7 images of each letter, 12 of
each digit), so their episodes take 6 images per class over 3 clients: one support and one
query image per class and client.
"""

import collections
import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import FIXTURES, REPO
from tff_meta.core import provenance
from tff_meta.core.config_file import ConfigError
from tff_meta.fewround import baselines
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import experiment
from tff_meta.fewround import tasks
from tff_meta.core.registry import UnknownNameError

CONFIG = 'configs/fewround/femnist62_5way_iid.toml'


def _run(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'programs.train', '--progress=false', *args],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_runs_and_writes_results(tmp_path):
  out = tmp_path / 'run'
  proc = _run(f'--config={CONFIG}', '--methods=fedavg', '--test_episodes=2',
              '--test_rounds=1,2', '--examples_per_class=6', '--num_clients=3',
              f'--data_path={os.path.join(FIXTURES, "tff")}', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  results = json.loads((out / 'results.json').read_text())['results']
  assert [r['method'] for r in results] == ['fedavg']
  accuracy = results[0]['accuracy']
  assert set(accuracy) == {'1', '2'} and all(a['episodes'] == 2 for a in accuracy.values())
  assert all(0.0 <= a['mean'] <= 1.0 for a in accuracy.values())
  for a in accuracy.values():   # every episode's accuracy, for paired comparisons
    assert len(a['per_episode']) == 2 and np.isclose(np.mean(a['per_episode']), a['mean'])
  assert '| fedavg |' in (out / 'results.md').read_text()
  assert [r['code_version'] for r in provenance.read(str(out))] == [provenance.code_version()]


@pytest.mark.slow
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
  with pytest.raises(ConfigError, match="unknown key 'rounds_per_episode'"):
    config_lib.load(os.path.join(REPO, CONFIG), {'rounds_per_episode': 3})
  with pytest.raises(ConfigError, match="test_prototypes must be one of previous, recomputed, "
                     "got 'latest'"):
    config_lib.load(os.path.join(REPO, CONFIG), {'test_prototypes': 'latest'}).validate()
  assert config_lib.load(os.path.join(REPO, CONFIG), {'test_prototypes': 'recomputed'}
                         ).validate().hparams().test_prototypes == 'recomputed'
  cfg = config_lib.load(os.path.join(REPO, CONFIG), {'test_rounds': '1,2', 'n_way': '3,7'})
  assert cfg.test_rounds == (1, 2) and cfg.ways == 7 and cfg.n_way_arg == (3, 7)


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


def test_beta_is_server_lr_and_an_old_name_is_an_unknown_key(tmp_path):
  # beta is server_lr, as in the training configs; old run folders were rewritten once
  # (research/rename_config_keys.py), so the reader knows no old name.
  old = tmp_path / 'old.toml'
  old.write_text('meta_lr_decay_episode = 100\n')
  with pytest.raises(ConfigError, match=f"^{old}: unknown key 'meta_lr_decay_episode'; valid "):
    config_lib.load(str(old))
  assert config_lib.load(None, {'server_lr': '0.001'}).hparams().server_lr == 0.001


def _pretrain_losses(out):
  """(round, loss) of each pre-training round (the seconds column differs between runs)."""
  with open(out / 'pretrain' / 'metrics.csv', newline='') as f:
    return [(row['round'], row['train_loss']) for row in csv.DictReader(f)]


@pytest.mark.slow
def test_fine_tuning_baselines_share_one_pre_training(tmp_path):
  def run(out, methods):
    proc = _run(f'--config={CONFIG}', f'--methods={methods}', '--episodes=2', '--test_episodes=2',
                '--test_rounds=1', '--examples_per_class=6', '--num_clients=3',
                f'--data_path={os.path.join(FIXTURES, "tff")}', f'--output_dir={out}')
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / 'results.json').read_text())['results']

  rows = run(tmp_path / 'both', 'finetune_fedavg,finetune_oneshot')
  assert [r['method'] for r in rows] == ['finetune_fedavg', 'finetune_oneshot']
  assert rows[0]['info'] == rows[1]['info'] == {'communication_rounds': 8, 'pretrain_classes': 40}
  # One-shot FL run alone (long_run.sh's oneshot cell where no baselines pre-training is there
  # to copy) pre-trains the same rounds to the same model, and so scores the same.
  alone = run(tmp_path / 'alone', 'finetune_oneshot')
  assert _pretrain_losses(tmp_path / 'alone') == _pretrain_losses(tmp_path / 'both')
  assert len(_pretrain_losses(tmp_path / 'both')) == 8
  assert alone[0]['accuracy'] == rows[1]['accuracy']


def test_pre_training_runs_once_per_context(monkeypatch):
  calls = []

  def fake_pretrain(computations, weights, sample, rounds, progress, **kwargs):
    calls.append(rounds)
    return [w + 1.0 for w in weights]

  monkeypatch.setattr(baselines.training, 'federated_pretrain', fake_pretrain)
  monkeypatch.setattr(baselines.process_lib, 'build_round', lambda *args: None)
  cfg = config_lib.load(os.path.join(REPO, CONFIG), {'episodes': 2})
  data = tasks.ClassSplitData('toy', np.zeros([30, 28, 28], np.float32),
                              np.arange(30, dtype=np.int32) % 6, collections.OrderedDict(
                                  train=np.arange(4), validation=np.array([4]),
                                  test=np.array([5])))
  ctx = baselines.Context(cfg, data)
  first = baselines.METHODS.get('finetune_fedavg')(ctx)
  second = baselines.METHODS.get('finetune_oneshot')(ctx)
  assert calls == [8]                                   # T * (R + 1), once
  body = first.model.num_backbone
  for a, b in zip(first.weights[:body], second.weights[:body]):
    np.testing.assert_array_equal(a, b)
  assert first.episode_fn is None and second.episode_fn.keep == cfg.num_clients


@pytest.mark.slow
def test_select_every_deploys_the_validation_best_checkpoint(tmp_path):
  common = [f'--config={CONFIG}', '--methods=frl_distance', '--test_episodes=2',
            '--test_rounds=1', '--examples_per_class=6', '--num_clients=3', '--checkpoint_every=1',
            f'--data_path={os.path.join(FIXTURES, "tff")}']
  out = tmp_path / 'selected'
  proc = _run(*common[:1], '--methods=frl_distance,finetune_fedavg', *common[2:], '--episodes=4',
              '--select_every=2', '--select_episodes=2', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  frl, finetune = json.loads((out / 'results.json').read_text())['results']
  curve = frl['info']['validation_curve']
  assert sorted(curve, key=int) == ['2', '4']
  best = max(curve, key=lambda v: (curve[v], -int(v)))
  assert frl['info']['selected_episode'] == int(best)
  assert frl['info']['selection_validation_accuracy'] == curve[best]
  with open(out / 'frl_distance' / 'selection_2.csv') as f:
    assert f.read().splitlines()[0] == 'version,validation_accuracy'
  assert sorted(finetune['info']['validation_curve'], key=int) == ['8', '16']   # (R + 1) * 2
  # The deployed phi is the chosen checkpoint's: a run that stops there tests the same.
  plain = tmp_path / 'plain'
  proc = _run(*common, f'--episodes={best}', f'--output_dir={plain}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  again = json.loads((plain / 'results.json').read_text())['results'][0]
  assert again['accuracy']['1']['per_episode'] == frl['accuracy']['1']['per_episode']
  # A rerun reads the scores back and chooses the same (another test length, so the
  # method is prepared and tested again rather than read from results.json). The plain run and
  # the rerun leave out finetune_fedavg, which the checks after the first run do not look at.
  proc = _run(*common[:2], '--test_episodes=3', *common[3:], '--episodes=4', '--select_every=2',
              '--select_episodes=2', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'tested already' not in proc.stdout
  assert json.loads((out / 'results.json').read_text())['results'][0]['info'] == frl['info']


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
def test_a_learned_temperature_is_meta_trained_and_reported(tmp_path):
  out = tmp_path / 'tau'
  data = f'--data_path={os.path.join(FIXTURES, "tff")}'
  proc = _run(f'--config={CONFIG}', '--methods=frl_distance', '--test_episodes=2',
              '--test_rounds=1', '--examples_per_class=6', '--num_clients=3', '--episodes=2',
              '--temperature=learned', '--temperature_lr_scale=100', '--checkpoint_every=1',
              data, f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  info = json.loads((out / 'results.json').read_text())['results'][0]['info']
  # two Adam steps of 100 * beta each move t = log(tau) off 0
  assert info['temperature'] != pytest.approx(1.0, abs=1e-3)
  assert np.isfinite(info['temperature']) and info['temperature'] > 0

  # research/fewround_embedding.py reads every kept phi of that run, tau included
  def embedding(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    return subprocess.run([sys.executable, '-m', 'research.fewround_embedding', *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  proc = embedding(f'--run_dir={out}', '--method=frl_distance', data, '--episodes=1')
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = [line.split('|') for line in proc.stdout.splitlines() if line.startswith('| ')][1:]
  assert [int(r[1]) for r in rows] == [1, 2]        # one row per kept checkpoint
  assert float(rows[-1][6]) == pytest.approx(info['temperature'], abs=1e-3)   # tau at phi
  for args, message in (([f'--run_dir={out}', '--method=fedavg'], '--method=fedavg is not'),
                        ([f'--run_dir={out}', '--method=frl_linear'], 'no checkpoints at'),
                        ([], '--run_dir is required')):
    proc = embedding(*args, data)
    last = proc.stderr.strip().splitlines()[-1]   # after TF's start-up lines
    assert proc.returncode != 0 and last.startswith(f'error: {message}'), proc.stderr
    assert 'Traceback' not in proc.stderr


def test_select_every_must_be_a_multiple_of_checkpoint_every():
  with pytest.raises(ConfigError, match='select_every must be 0 or a multiple of '
                     'checkpoint_every \\(50\\), got 30'):
    config_lib.load(os.path.join(REPO, CONFIG), {'select_every': 30}).validate()


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
