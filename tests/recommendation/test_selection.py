"""Model selection on validation users ("early stopping"): the kept state is the one with the
lowest validation RMSE, a resumed run keeps the best-so-far, and test users never choose."""

import csv
import dataclasses
import os

import numpy as np
import pytest

from tests.recommendation import ml100k_files
from tff_meta.core.config_file import ConfigError
from tff_meta.recommendation import config, loop, movielens_task

# A hand-made validation curve: RMSE at each evaluated episode (eval_every = 2, and the end).
CURVE = {0: 1.0, 2: 0.9, 4: 0.7, 6: 0.8, 8: 0.7}   # lowest 0.7 first at 4 (a tie at 8)


class Interrupted(Exception):
  pass


def _run(out, episodes, calls, stop_at=None, mode='min'):
  def step(state, episode):
    if episode == stop_at:
      raise Interrupted   # a killed run: nothing after the last checkpoint is kept
    calls.append(episode)
    return {'e': np.float64(episode), 'sum': state['sum'] + episode}
  return loop.run_episodes(
      name='toy', initial_state={'e': np.float64(0), 'sum': np.float64(0)}, step=step,
      evaluate=lambda s: {'rmse': CURVE.get(int(s['e']), 5.0)}, episodes=episodes,
      eval_every=2, checkpoint_every=3, output_dir=str(out), show_progress=False,
      select=('rmse', mode))


def test_kept_state_is_the_lowest_of_a_hand_made_curve(tmp_path):
  state, curve, kept = _run(tmp_path / 'a', 8, [])
  assert [r['episode'] for r in curve] == [0, 2, 4, 6, 8]
  assert kept.episode == 4 and kept.state['e'] == 4 and kept.state['sum'] == 1 + 2 + 3 + 4
  assert state['e'] == 8                     # the final state is still returned
  assert loop.select_best(curve, 'rmse', 'max') == 0
  _, _, highest = _run(tmp_path / 'b', 8, [], mode='max')
  assert highest.episode == 0 and highest.state['sum'] == 0


@pytest.mark.parametrize('stop_at', [5, 7])
def test_a_resumed_run_keeps_the_best_so_far(tmp_path, stop_at):
  """Killed at `stop_at` (checkpoints at 3 and 6; the best, 4, lies before the kill), then
  resumed: the kept state is the uninterrupted run's, though the state at 4 is long gone."""
  _, full_curve, full = _run(tmp_path / 'full', 8, [])
  calls = []
  with pytest.raises(Interrupted):
    _run(tmp_path / 'part', 8, calls, stop_at=stop_at)
  _, curve, kept = _run(tmp_path / 'part', 8, calls)
  assert kept.episode == full.episode == 4
  assert kept.state['sum'] == full.state['sum'] == 10
  assert curve == full_curve
  last_checkpoint = 3 * ((stop_at - 1) // 3)
  assert calls == list(range(1, stop_at)) + list(range(last_checkpoint + 1, 9))


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
  return ml100k_files.write(tmp_path_factory.mktemp('ml'), num_users=20, num_items=40, seed=2)


def _cfg(folder, out, **overrides):
  base = dict(task='movielens', data_path=folder, output_dir=str(out), validation_fraction=0.25,
              select_on='validation_rmse', model='rating_wide_mlp', rating_init='bias',
              episodes=4, eval_every=1, checkpoint_every=2, inner_steps=2, hidden_units=4,
              inner_lr=0.5, pretrain_lr=0.3, server_lr=0.3)
  return dataclasses.replace(config.RecommendConfig(), **{**base, **overrides}).validate()


def _curve_csv(path):
  with open(path, newline='') as f:
    return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _flip_test_users(data):
  """The same data with every test user's ratings mirrored (6 - r): a different test set."""
  flip = lambda e: dataclasses.replace(e, support_y=6.0 - e.support_y, query_y=6.0 - e.query_y)
  for t in (data.tasks, data.items):
    t.test = [flip(e) for e in t.test]
  return data


@pytest.mark.slow
@pytest.mark.parametrize('method', ['nn_pretrained', 'maml'])
def test_test_users_never_choose_and_the_kept_parameters_are_scored(folder, tmp_path, tff_context,
                                                                    method):
  run = movielens_task.METHODS.get(method)
  cfg = _cfg(folder, tmp_path / 'a')
  data = movielens_task.prepare(cfg)
  assert data.tasks.validation and not ({e.user for e in data.tasks.validation}
                                        & {e.user for e in data.tasks.test})
  result = run(cfg, data, False)
  # The curve scores the validation users (its log, curve.csv), and the kept episode is its
  # lowest RMSE.
  logged = _curve_csv(tmp_path / 'a' / method / 'curve.csv')
  assert [r['episode'] for r in logged] == list(range(5))
  assert result.selected_episode == min(logged, key=lambda r: r['rmse'])['episode']
  assert result.row()['selected_episode'] == result.selected_episode
  # Other test users' ratings: the same curve and choice, other test metrics.
  other = run(_cfg(folder, tmp_path / 'b'), _flip_test_users(movielens_task.prepare(cfg)), False)
  assert other.selected_episode == result.selected_episode
  assert _curve_csv(tmp_path / 'b' / method / 'curve.csv') == logged
  assert other.metrics['rmse'] != pytest.approx(result.metrics['rmse'])
  if method == 'nn_pretrained':
    return   # the rest is `methods`' code, shared by both
  # The table's metrics are those of the kept parameters (here MAML's validation RMSE dips at
  # episode 1 of 4): a run stopped there scores the same.
  assert 0 < result.selected_episode < cfg.episodes
  stopped = run(_cfg(folder, tmp_path / 'c', select_on='last', episodes=result.selected_episode),
                data, False)
  assert stopped.metrics == pytest.approx(result.metrics)
  assert stopped.selected_episode is None and 'selected_episode' not in stopped.row()


@pytest.mark.slow
def test_maml_from_the_pretrained_start_starts_at_nn_pretrained_kept_network(folder, tmp_path,
                                                                          tff_context):
  """MAML(pre-trained start): its episode 0 is NN(pre-trained)'s kept network (not its last,
  not the shared start), scored the same on the validation users; NN(pre-trained) ran once."""
  cfg = _cfg(folder, tmp_path, episodes=6, eval_every=2, checkpoint_every=3, pretrain_lr=0.05)
  data = movielens_task.prepare(cfg)
  nn = movielens_task.nn_pretrained(cfg, data, False)
  nn_curve = _curve_csv(tmp_path / 'nn_pretrained' / 'curve.csv')
  assert 0 < nn.selected_episode < cfg.episodes   # a kept network that is neither end
  written = os.stat(tmp_path / 'nn_pretrained' / 'curve.csv').st_mtime_ns
  result = movielens_task.METHODS.get('maml_pretrained')(cfg, data, False)
  # Stage 1 resumed from its final checkpoint: no episode ran, no row was written.
  assert os.stat(tmp_path / 'nn_pretrained' / 'curve.csv').st_mtime_ns == written
  assert result.method == movielens_task.MAML_PRETRAINED
  curve = _curve_csv(tmp_path / 'maml_pretrained' / 'curve.csv')
  kept = next(r for r in nn_curve if r['episode'] == nn.selected_episode)
  assert curve[0] == pytest.approx({**kept, 'episode': 0.0}, rel=1e-5)
  assert curve[0]['rmse'] != pytest.approx(nn_curve[0]['rmse'], rel=1e-5)
  assert curve[0]['rmse'] != pytest.approx(nn_curve[-1]['rmse'], rel=1e-5)
  assert [r['episode'] for r in curve] == [0, 2, 4, 6]
  assert result.selected_episode == min(curve, key=lambda r: r['rmse'])['episode']


@pytest.mark.parametrize('overrides,match', [
    ({'select_on': 'validation_rmse'}, 'needs validation users'),
    ({'evaluate_on': 'validation'}, 'needs validation users'),
    ({'select_on': 'best', 'validation_fraction': 0.2}, 'select_on must be one of'),
    ({'task': 'service', 'select_on': 'validation_rmse', 'validation_fraction': 0.2},
     'movielens'),
])
def test_bad_selection_settings_are_named(overrides, match):
  with pytest.raises(ConfigError, match=match):
    dataclasses.replace(config.RecommendConfig(), **overrides).validate()


def test_the_table_prints_the_kept_episode():
  rows = [{'method': 'Bias baseline', 'rmse': 0.95, **{f'precision@{k}': 0.3 for k in (1, 3, 10)}},
          {'method': 'MAML', 'rmse': 0.93, 'selected_episode': 1250,
           **{f'precision@{k}': 0.4 for k in (1, 3, 10)}}]
  table = movielens_task.format_table([('80% Support', rows)])
  assert '| Precision@10 | kept episode (lowest validation RMSE) |' in table
  assert '| 80% Support | MAML | 0.9300 | 40.00% | 40.00% | 40.00% | 1250 |' in table
  assert '| 80% Support | Bias baseline | 0.9500 | 30.00% | 30.00% | 30.00% |  |' in table
