"""The one checkpointed loop with a numpy state: a killed and resumed run writes the files and
reaches the state of an uninterrupted one, keeps its selected state, and stops on divergence."""

import os

import numpy as np
import pytest

from tff_meta.core import run_folder
from tff_meta.core import loop

VALIDATION = {0: 3.0, 2: 2.0, 4: 1.0, 6: 1.5, 8: 1.0, 10: 2.5}   # lowest first at 4


class Killed(Exception):
  pass


class Diverged(Exception):
  pass


def _run(folder, total=10, kill_at=None, calls=None, loss=None):
  def step(state, n):
    if n == kill_at:
      raise Killed()
    if calls is not None:
      calls.append(n)
    new = {'n': np.int64(n), 'w': state['w'] * 0.5 + n}
    return new, {'loss': loss(n) if loss else float(new['w'][0]), 'w1': float(new['w'][1])}
  return loop.run_sync(
      name='toy', folder=str(folder), initial={'n': np.int64(0), 'w': np.array([1.0, -1.0])},
      step=step, total=total, checkpoint_every=3, keep_total=2, unit='step',
      step_file='metrics.csv', step_tensorboard='tensorboard',
      evaluation=loop.Evaluation(
          evaluate=lambda s, n: {'val': VALIDATION.get(int(s['n']), 9.0)},
          evaluates=lambda n: n % 2 == 0 or n == total, csv_file='eval.csv',
          tensorboard_dir='tensorboard/eval'),
      select=('val', 'min'), check=loop.stop_if_not_finite(Diverged, ('loss',), 'toy'))


def _read(folder, name):
  with open(os.path.join(folder, name), encoding='utf-8') as f:
    return f.read()


@pytest.mark.parametrize('kill_at', [5, 8])
def test_resume_equals_an_uninterrupted_run_and_keeps_the_selection(tmp_path, kill_at):
  full = _run(tmp_path / 'full')
  assert full.selected.step == 4 and full.selected.state['n'] == 4
  calls = []
  with pytest.raises(Killed):
    _run(tmp_path / 'part', kill_at=kill_at, calls=calls)
  resumed = _run(tmp_path / 'part', calls=calls)
  last_checkpoint = 3 * ((kill_at - 1) // 3)
  assert resumed.start == last_checkpoint
  assert calls == list(range(1, kill_at)) + list(range(last_checkpoint + 1, 11))
  np.testing.assert_array_equal(resumed.state['w'], full.state['w'])
  # The state at 4 is gone from memory after a kill at 8: it comes back from the checkpoint.
  assert resumed.selected.step == 4
  np.testing.assert_array_equal(resumed.selected.state['w'], full.selected.state['w'])
  assert resumed.evaluations == full.evaluations
  assert [r['step'] for r in full.evaluations] == [0, 2, 4, 6, 8, 10]
  assert run_folder.read_history(str(tmp_path / 'part' / 'eval.csv')) == full.evaluations
  assert _read(tmp_path / 'part', 'metrics.csv') == _read(tmp_path / 'full', 'metrics.csv')
  assert 'program_state_10' in os.listdir(tmp_path / 'part' / 'checkpoints')


def test_a_finished_run_reruns_nothing(tmp_path):
  _run(tmp_path / 'a')
  calls = []
  again = _run(tmp_path / 'a', calls=calls)
  assert calls == [] and again.start == 10 and again.selected.step == 4


def test_divergence_stops_the_run(tmp_path):
  with pytest.raises(Diverged, match='toy diverged at step 3: loss'):
    _run(tmp_path / 'd', loss=lambda n: float('nan') if n == 3 else 1.0)
  rows = run_folder.read_history(str(tmp_path / 'd' / 'metrics.csv'))
  assert [r['step'] for r in rows] == [1, 2]            # the diverged step is not released
  assert not os.path.exists(tmp_path / 'd' / 'checkpoints' / 'program_state_3')
