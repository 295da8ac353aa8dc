"""The episode loop's checkpoints/resume, and a service run from a CSV log end to end."""

import json

import numpy as np
import pytest

from tff_meta.core import run_folder
from tff_meta.recommendation import config, event_log, experiment, loop


def _run(out, episodes, calls):
  def step(state, episode):
    calls.append(episode)
    return {'w': state['w'] + episode}
  return loop.run_episodes(name='toy', initial_state={'w': np.zeros(2)}, step=step,
                           evaluate=lambda s: {'w0': float(s['w'][0])}, episodes=episodes,
                           eval_every=2, checkpoint_every=2, output_dir=str(out),
                           show_progress=False)


def test_resume_continues_without_duplicates(tmp_path):
  full_calls, part_calls = [], []
  full, full_curve = _run(tmp_path / 'full', 6, full_calls)
  _run(tmp_path / 'part', 3, part_calls)                 # "killed" after episode 3
  resumed, curve = _run(tmp_path / 'part', 6, part_calls)
  np.testing.assert_array_equal(resumed['w'], full['w'])
  assert full_calls == [1, 2, 3, 4, 5, 6] and part_calls == [1, 2, 3, 4, 5, 6]
  assert [r['episode'] for r in curve] == [0, 2, 3, 4, 6]   # 3: the end of the first session
  assert curve == run_folder.read_history(str(tmp_path / 'part' / 'curve.csv'))
  assert any((tmp_path / 'part' / 'tensorboard' / 'eval').iterdir())   # the curve, released
  assert [r['episode'] for r in full_curve] == [0, 2, 4, 6]
  assert curve[-1]['w0'] == full_curve[-1]['w0'] == 21


@pytest.mark.slow
def test_service_run_from_csv(tmp_path):
  frame = event_log.generate_event_log(15, num_services=40, events=(60, 90), seed=3)
  path = event_log.write_event_log(frame, str(tmp_path / 'log.csv'))
  cfg = config.from_dict(dict(
      task='service', data_path=path, output_dir=str(tmp_path / 'run'), support_fraction=0.05,
      methods='mfu,mru,nb,lr_self,nn_unified,metasgd_nn', episodes=3, eval_every=2,
      checkpoint_every=2, inner_steps=2, inner_lr=0.5, self_steps='3,6', pretrain_steps=3,
      hidden_units=8, max_classes=10))
  result = experiment.run(cfg, show_progress=False)
  names = [r['method'] for r in result.rows]
  assert names == ['MFU', 'MRU', 'NB', 'LR 3 steps', 'LR 6 steps', 'NN-unified', 'Meta-SGD + NN']
  for r in result.rows:
    assert 0 <= r['top1'] <= r['top4'] <= 1
  settings = {r['method']: r['setting'] for r in result.rows}
  assert settings['NN-unified'] == 'MIXED' and settings['Meta-SGD + NN'] == 'META'
  meta = result.rows[-1]
  assert meta['algorithm_params'] == 2 * meta['model_params']    # Meta-SGD: theta and alpha
  # The model: (C + 1 + 24 + 7 + contexts) -> 8 -> C.
  dim = 10 + 1 + 24 + 7 + 3 + 2
  assert meta['model_params'] == dim * 8 + 8 + 8 * 10 + 10
  table = experiment.format_results([result])
  assert '| META | Meta-SGD + NN |' in table and '5% Support Top 1' in table
  assert '| Meta-SGD + NN | ' + str(meta['algorithm_params']) in table
  saved = json.loads((tmp_path / 'run' / 'results.json').read_text())
  assert [r['episode'] for r in saved['curves']['Meta-SGD + NN']] == [0, 2, 3]
  assert saved['data_fingerprint'] is None   # service runs are grouped by path
  for f in ('curve.png', 'table.md', 'config.toml', 'metasgd_nn/curve.csv', 'nn_unified/checkpoints'):
    assert (tmp_path / 'run' / f).exists(), f


def test_bad_config_is_named():
  with pytest.raises(config.ConfigError, match="unknown key 'episode'"):
    config.from_dict({'episode': 3})
  with pytest.raises(Exception, match="Unknown service method 'maml'"):
    experiment.validate(config.from_dict({'task': 'service', 'methods': 'maml'}))
  assert config.from_dict({'sort_log': 'false'}).sort_log is False
  with pytest.raises(config.ConfigError,
                     match=r"sort_log: expected a bool \(true or false\), got 'maybe'"):
    config.from_dict({'sort_log': 'maybe'})
  with pytest.raises(config.ConfigError,
                     match="unknown key 'meta_optimizer'; valid keys"):
    config.from_dict({'meta_optimizer': 'sgd'})
  with pytest.raises(config.ConfigError, match='self_steps'):
    config.from_dict({'self_steps': '100,x'}).validate()


@pytest.mark.slow
@pytest.mark.parametrize('select_on, line', [('validation_rmse', 0.7), ('last', 0.9)])
def test_the_reference_line_scores_the_users_the_curves_score(tmp_path, monkeypatch, select_on,
                                                              line):
  """Under model selection the curves score validation users: the reference method's line is its
  curve_reference; otherwise its row (the test users)."""
  import tff_meta.recommendation.methods as methods_lib  # pylint: disable=g-import-not-at-top
  from tff_meta.core.registry import Registry  # pylint: disable=g-import-not-at-top
  registry = Registry('movielens method')
  registry.add('bias', lambda *_: methods_lib.MethodResult(
      'Bias baseline', {'rmse': 0.9}, curve_reference={'rmse': 0.7}))
  registry.add('maml', lambda *_: methods_lib.MethodResult(
      'MAML', {'rmse': 0.8}, curve=[{'episode': 0, 'rmse': 0.75}]))

  class Data:
    num_train_users = 50

    def summary(self):
      return 'fake data'

    def fingerprint(self):
      return None

  task = experiment.Task(lambda cfg: Data(), registry, ('bias', 'maml'), lambda blocks: 'table',
                         ('rmse',), reference_methods=('Bias baseline',))
  tasks = Registry('recommendation task')
  tasks.add('movielens', task)
  monkeypatch.setattr(experiment, 'TASKS', tasks)
  drawn = {}
  monkeypatch.setattr(experiment, 'plot_curves',
                      lambda curves, names, path, title, references: drawn.update(references))
  cfg = config.from_dict(dict(task='movielens', data_path='unused', methods='bias,maml',
                              output_dir=str(tmp_path / 'run'), select_on=select_on,
                              validation_fraction=0.2))
  experiment.run(cfg, show_progress=False)
  assert drawn['Bias baseline']['rmse'] == line


def test_fig2_keeps_one_colour_per_method_in_every_panel(tmp_path, monkeypatch):
  """plot_curves: a method's lines share one colour across the RMSE and precision panels; the
  reference's lines are black, dotted for a panel's first metric, dash-dotted for the others."""
  saved = []
  monkeypatch.setattr(experiment.files, 'save_figure', lambda fig, path, **kw: saved.append(fig))
  rows = lambda v: [{'episode': e, 'rmse': v + e, 'p1': v, 'p3': -v} for e in (0, 1)]
  experiment.plot_curves({'MAML': rows(1.0), 'NN': rows(2.0)}, ('rmse', 'p1', 'p3'),
                         str(tmp_path / 'c.png'), 'title',
                         references={'Bias': {'rmse': 1.5, 'p1': 0.5, 'p3': 0.4}})
  left, right = saved[0].axes
  colour = {ln.get_label(): ln.get_color() for ax in (left, right) for ln in ax.get_lines()}
  assert colour['MAML'] == colour['MAML p1'] == colour['MAML p3'] != colour['NN']
  assert colour['NN'] == colour['NN p1'] == colour['NN p3']
  style = {ln.get_label(): ln.get_linestyle() for ln in right.get_lines()}
  assert (style['MAML p1'], style['MAML p3'], style['Bias p1'], style['Bias p3']) == (
      '-', '--', ':', '-.')


def test_more_users_per_episode_than_training_users_is_refused(tmp_path):
  frame = event_log.generate_event_log(10, num_services=40, events=(40, 60), seed=1)
  path = event_log.write_event_log(frame, str(tmp_path / 'log.csv'))
  cfg = config.from_dict(dict(task='service', data_path=path, output_dir=str(tmp_path / 'run'),
                              support_fraction=0.05, methods='mfu', clients_per_episode=9,
                              max_classes=10))
  with pytest.raises(config.ConfigError, match='clients_per_episode = 9 is more than the 8 '
                                               'training users'):
    experiment.run(cfg, show_progress=False)
  assert not (tmp_path / 'run').exists()   # refused before anything is written
