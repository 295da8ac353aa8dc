"""programs/train.py end to end (FEMNIST-62, one cheap method) and its input errors;
test_program_selection.py holds the sweeps and checkpoint selection on validation classes,
test_program_resume.py the reruns into a run folder.

The runs read the 12-writer FEMNIST fixture (tests/fixtures/tff: 7 images of each letter, 12 of
each digit), so their episodes take 6 images per class over 3 clients: one support and one
query image per class and client.
"""

import collections
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import FIXTURES, REPO
from tests.fewround.fixtures import PROGRAM_CONFIG as CONFIG
from tests.fewround.fixtures import run_program as _run
from tff_meta.core import provenance
from tff_meta.core.config_file import ConfigError
from tff_meta.fewround import baselines
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import tasks
from tff_meta.core.registry import UnknownNameError


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
