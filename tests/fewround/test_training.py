"""Meta-training and pre-training loops: per-episode metrics, checkpoints, resume.

A run killed part-way (an exception in the middle of an episode after a
checkpoint) and started again ends with the same phi, the same Adam state and
the same metrics.csv rows as a run that was never stopped; the episode rows
released after the last checkpoint are dropped, not duplicated. Resuming
another configuration's checkpoints is refused before anything is written.
"""

import csv
import os

import numpy as np
import pytest

from tff_meta.core.run_folder import RunFolderError

from tests.fewround import fixtures
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import experiment, training
from tff_meta.fewround import process as P


class Killed(Exception):
  pass


def sampler(kill_at=None):
  """Episode i's clients: seeded by i alone (as `baselines.Context.episode` is)."""
  def sample(i):
    if i == kill_at:
      raise Killed()
    rng = np.random.default_rng(100 + i)
    return [fixtures.client(rng, (2, 3, 2)), fixtures.client(rng, (3, 1, 2), query=5)]
  return sample


def rows(run_dir):
  with open(os.path.join(run_dir, 'metrics.csv'), newline='') as f:
    return [{k: v for k, v in r.items() if k != 'seconds'} for r in csv.DictReader(f)]


@pytest.fixture(scope='module')
def process(tff_worker):
  hp = P.FewRoundHparams(rounds=2, gamma=0.5, inner_lr=0.05, server_lr=0.01,
                         server_lr_decay_episode=3, meta_update='server_adam')
  return P.build_meta_training(fixtures.tiny(), hp, P.data_spec(fixtures.SHAPE))


@pytest.mark.slow
def test_meta_train_logs_every_episode_and_resumes_identically(process, tff_context, tmp_path):
  straight = str(tmp_path / 'straight')
  phi, history = training.meta_train(process, sampler(), 5, run_dir=straight, checkpoint_every=2)
  logged = rows(straight)
  assert [r['episode'] for r in logged] == ['1', '2', '3', '4', '5']
  assert set(logged[0]) >= {'query_accuracy', 'query_loss', 'support_loss_round0',
                            'support_loss_round1', 'meta_lr'}
  assert [float(r['meta_lr']) for r in logged] == pytest.approx([0.01] * 3 + [0.001] * 2)
  assert history == [float(r['query_accuracy']) for r in logged]
  assert all(np.isfinite(float(r['query_loss'])) for r in logged)
  assert os.listdir(os.path.join(straight, 'tensorboard'))

  resumed = str(tmp_path / 'resumed')
  with pytest.raises(Killed):     # dies in episode 4, after the checkpoint of episode 2
    training.meta_train(process, sampler(kill_at=3), 5, run_dir=resumed, checkpoint_every=2)
  assert [r['episode'] for r in rows(resumed)] == ['1', '2', '3']
  phi2, history2 = training.meta_train(process, sampler(), 5, run_dir=resumed,
                                       checkpoint_every=2)
  for a, b in zip(phi, phi2):
    np.testing.assert_array_equal(a, b)
  assert rows(resumed) == logged and history2 == history


@pytest.mark.slow
def test_every_checkpoint_is_kept(process, tff_context, tmp_path):
  run_dir = str(tmp_path / 'all')
  training.meta_train(process, sampler(), 5, run_dir=run_dir, checkpoint_every=1)
  assert sorted(os.listdir(os.path.join(run_dir, 'checkpoints'))) == [
      f'program_state_{v}' for v in range(1, 6)]


@pytest.mark.slow
def test_pretrain_resumes_identically(process, tff_context, tmp_path):
  model = fixtures.tiny('linear')
  computations = P.build_round(model, P.FewRoundHparams(inner_lr=0.05),
                               P.data_spec(fixtures.SHAPE))
  straight = str(tmp_path / 'straight')
  want = training.federated_pretrain(computations, model.initial_weights, sampler(), 4,
                                     run_dir=straight, checkpoint_every=1)
  assert [r['round'] for r in rows(straight)] == ['1', '2', '3', '4']
  resumed = str(tmp_path / 'resumed')
  with pytest.raises(Killed):
    training.federated_pretrain(computations, model.initial_weights, sampler(kill_at=2), 4,
                                run_dir=resumed, checkpoint_every=1)
  got = training.federated_pretrain(computations, model.initial_weights, sampler(), 4,
                                    run_dir=resumed, checkpoint_every=1)
  for a, b in zip(want, got):
    np.testing.assert_array_equal(a, b)
  assert rows(resumed) == rows(straight)
  unlogged = training.federated_pretrain(computations, model.initial_weights, sampler(), 4)
  for a, b in zip(want, unlogged):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_resuming_another_configuration_is_refused(tmp_path):
  out = str(tmp_path / 'run')
  cfg = config_lib.load(None, {'episodes': 10})
  experiment.prepare_output(cfg, out)
  os.makedirs(os.path.join(out, 'frl_distance', 'checkpoints', 'program_state_5'))
  experiment.prepare_output(config_lib.load(None, {'episodes': 20}), out)   # extends the run
  # the test-time prototype rule does not enter the checkpointed state: a saved phi is
  # re-scored with the other rule from the same folder
  rescored = config_lib.load(None, {'episodes': 20, 'test_prototypes': 'recomputed'})
  experiment.prepare_output(rescored, out)
  with pytest.raises(RunFolderError, match='inner_lr: 0.1 -> 0.3'):
    experiment.prepare_output(config_lib.load(None, {'episodes': 20, 'inner_lr': 0.3}), out)
