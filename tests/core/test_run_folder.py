"""tff_meta/core/run_folder.py on run folders written by hand: costs per round, resumes, search."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from tff_meta.core import resume
from tff_meta.core import run_folder

CONFIG = ('algorithm = "fedavg"\ndataset = "digits"\nmodel = "mlp"\nsupport_fraction = 0.2\n'
          'seed = 3\n')
# Round 2 appears twice, as after a resume from round 1: the second row is the one that counts.
METRICS = ('round,bytes_down,bytes_up,client_flops\n'
           '1,100,10,1000\n2,999,999,999\n2,200,20,2000\n3,300,30,\n')
RESULTS = {'summary': {'method': 'FedAvg', 'accuracy': 50.0},
           'history': [{'round': 3, 'test_accuracy': 0.6}, {'round': 1, 'test_accuracy': 0.4}],
           'test_client_accuracies': [0.5, 0.7]}


def _write_run(folder, metrics=METRICS):
  folder.mkdir(parents=True)
  (folder / run_folder.CONFIG_FILE).write_text(CONFIG)
  (folder / run_folder.METRICS_FILE).write_text(metrics)
  (folder / run_folder.RESULTS_FILE).write_text(json.dumps(RESULTS))
  return folder


def test_load_run_sums_costs_per_round(tmp_path):
  run = run_folder.load_run(str(_write_run(tmp_path / 'run')))
  assert run.method == 'FedAvg' and run.algorithm == 'fedavg' and run.seed == 3
  assert run.setting == run_folder.Setting('digits', 'mlp', 0.2)
  assert run.setting.label == 'digits, mlp, p=20%'
  assert [h['round'] for h in run.history] == [1.0, 3.0]   # sorted by round
  np.testing.assert_array_equal(run.cum_bytes, [110, 330, 660])
  assert run.cost_at(0) == (0.0, 0.0)
  assert run.cost_at(2) == (330.0, 3000.0)
  assert run.cost_at(3) == (660.0, None)   # round 3 has no client_flops
  assert run.first_round_reaching(0.5) == 3 and run.first_round_reaching(0.7) is None


def test_totals_and_history_count_each_round_once(tmp_path):
  folder = _write_run(tmp_path / 'run')
  metrics = str(folder / run_folder.METRICS_FILE)
  assert run_folder.read_total(metrics, 'bytes_down') == 600.0    # 100 + 200 + 300
  assert run_folder.read_total(metrics, 'client_flops') == 3000.0  # round 3 left empty
  assert np.isnan(run_folder.read_total(str(folder / 'missing.csv'), 'bytes_down'))
  assert run_folder.read_history(str(folder / 'missing.csv')) == []
  (folder / run_folder.EVAL_FILE).write_text('round,test_accuracy,epsilon\n0,0.1,\n5,0.6,2.5\n')
  assert run_folder.read_history(str(folder / run_folder.EVAL_FILE)) == [
      {'round': 0.0, 'test_accuracy': 0.1}, {'round': 5.0, 'test_accuracy': 0.6, 'epsilon': 2.5}]


def test_read_by_key_takes_the_last_row_of_each_key(tmp_path):
  path = tmp_path / 'metrics.csv'
  # Episode 2 re-run after a resume; episode 3's re-run row left the loss empty.
  path.write_text('episode,loss,seconds\n1,0.9,1\n2,0.8,1\n3,0.7,1\n2,0.6,2\n3,,2\n,0.1,9\n')
  assert run_folder.read_by_key(str(path), 'episode', 'loss') == {1: 0.9, 2: 0.6}
  assert run_folder.read_by_key(str(path), 'episode', 'seconds') == {1: 1.0, 2: 2.0, 3: 2.0}
  assert run_folder.read_by_key(str(path), 'round', 'loss') == {}   # no such key column
  assert run_folder.read_by_key(str(tmp_path / 'missing.csv'), 'episode', 'loss') == {}


def test_read_total_counts_the_last_row_of_a_repeated_round(tmp_path):
  path = tmp_path / 'metrics.csv'
  path.write_text('round,round_seconds\n1,1.5\n2,7\n2,\n3,2.5\n')
  assert run_folder.read_total(str(path), 'round_seconds') == 4.0   # round 2's last row is empty
  path.write_text('round_seconds\n1.5\n2.5\n')
  assert run_folder.read_total(str(path), 'round_seconds') == 0.0   # no round column: no rounds


@pytest.mark.parametrize('content, message', [
    ('round,loss\n1,0.5\n2,nan?\n', 'line 3: holds a value that is not a number'),
    ('round,loss\nx,0.5\n', 'line 2: holds a value that is not a number'),
    ('round,loss\n1,0.5,7\n', 'line 2: has a different number of cells'),
    ('round,loss\n1\n', 'line 2: has a different number of cells'),
])
def test_damaged_metrics_and_history_name_the_file_and_line(tmp_path, content, message):
  path = tmp_path / 'metrics.csv'
  path.write_text(content)
  with pytest.raises(run_folder.RunFolderError, match=f'metrics.csv, {message}'):
    run_folder.read_by_key(str(path), 'round', 'loss')
  with pytest.raises(run_folder.RunFolderError, match=f'metrics.csv, {message}'):
    run_folder.read_history(str(path))
  path.write_bytes(b'round,loss\n1,\xff\n')
  with pytest.raises(run_folder.RunFolderError, match='not a readable CSV file'):
    run_folder.read_total(str(path), 'loss')


def test_metrics_without_flops_and_with_a_gap(tmp_path):
  run = run_folder.load_run(str(_write_run(
      tmp_path / 'a', 'round,bytes_down,bytes_up\n1,1,2\n2,3,4\n3,5,6\n')))
  assert not run.has_flops and run.cost_at(3) == (21.0, None)
  gap = _write_run(tmp_path / 'b', 'round,bytes_down,bytes_up\n1,1,2\n3,5,6\n')
  with pytest.raises(run_folder.RunFolderError, match=f'{gap}: metrics.csv: rounds are not 1, 2'):
    run_folder.load_run(str(gap))


def test_find_run_folders_skips_checkpoints_and_lists_unfinished(tmp_path):
  done = _write_run(tmp_path / 'runs' / 'done')
  (done / run_folder.CHECKPOINTS_DIR / 'inner').mkdir(parents=True)   # never searched
  (done / run_folder.CHECKPOINTS_DIR / 'inner' / run_folder.RESULTS_FILE).write_text('{}')
  going = tmp_path / 'runs' / 'going'
  going.mkdir()
  (going / run_folder.CONFIG_FILE).write_text(CONFIG)
  found, unfinished = run_folder.find_run_folders([str(tmp_path / 'runs'), str(done)])
  assert found == [str(done)] and unfinished == [str(going)]


def test_reading_runs_and_reports_load_no_tensorflow():
  code = ('import sys; from tff_meta.core import run_folder; from tff_meta.analysis import report; '
          'print("tensorflow" in sys.modules or "tensorflow_federated" in sys.modules)')
  out = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True,
                       check=True)
  assert out.stdout.strip() == 'False'


# --------------------------------------------------------------------------- resuming a folder

SAVED = {'seed': 0, 'rounds': 10, 'name': 'a', 'lr': 0.1, 'score': float('nan'),
         'hparams': {'inner_lr': 0.1, 'steps': [1, 2]}, 'data': {'cache_dir': '/d'}}


def _changes(current, **rules):
  rules.setdefault('may_differ', ('name',))
  return resume.settings_changes(SAVED, current, **rules)


def test_settings_changes_name_each_key_old_and_new():
  assert _changes(SAVED) == []
  assert _changes({**SAVED, 'name': 'b'}) == []                     # may differ
  assert _changes({**SAVED, 'seed': 7, 'hparams': {'inner_lr': 0.2, 'steps': [1, 2]},
                   'data': {}}) == [
      "data.cache_dir: '/d' -> (absent)", 'hparams.inner_lr: 0.1 -> 0.2', 'seed: 0 -> 7']
  assert _changes({**SAVED, 'hparams': {'inner_lr': 0.1, 'steps': [1, 3]}}) == [
      'hparams.steps: [1, 2] -> [1, 3]']
  # A whole table may differ; a key of it named alone may too.
  assert _changes({**SAVED, 'data': {'cache_dir': '/e'}}, may_differ=('data',)) == []
  assert _changes({**SAVED, 'hparams': {'inner_lr': 9, 'steps': [1, 2]}},
                  may_differ=('hparams.inner_lr',)) == []


def test_settings_that_may_grow_refuse_to_shrink():
  assert _changes({**SAVED, 'rounds': 20}, may_grow={'rounds'}) == []
  assert _changes({**SAVED, 'rounds': 5}, may_grow={'rounds'}) == [
      'rounds: 10 -> 5 (it may only grow)']
  assert _changes({**SAVED, 'rounds': 20}) == ['rounds: 10 -> 20']


def test_settings_an_older_config_lacks_count_as_their_defaults():
  current = {**SAVED, 'new_key': 3, 'hparams': {**SAVED['hparams'], 'beta': 0.5}}
  defaults = {'new_key': 3, 'hparams': {'beta': 0.5}}
  assert _changes(current, defaults=defaults) == []
  assert _changes({**current, 'new_key': 4}, defaults=defaults) == ['new_key: 3 -> 4']
  assert _changes(current) == ['hparams.beta: (absent) -> 0.5', 'new_key: (absent) -> 3']
  # A saved key today's schema lacks (renamed or dropped) is a change: its value made the run.
  assert resume.settings_changes({**SAVED, 'gone': 1}, SAVED, may_differ=()) == [
      'gone: 1 -> (not a setting of this version)']
  assert resume.settings_changes({**SAVED, 'gone': 1}, SAVED, may_differ=('gone',)) == []


def test_check_resume_refuses_other_settings_and_changes_nothing(tmp_path):
  folder = tmp_path / 'run'
  resume.check_resume(str(folder), SAVED, may_differ=())   # a new folder: nothing to check
  folder.mkdir()
  (folder / run_folder.CONFIG_FILE).write_text('seed = 0\nrounds = 10\n')
  resume.check_resume(str(folder), {'seed': 0, 'rounds': 10}, may_differ=())
  with pytest.raises(run_folder.RunFolderError) as e:
    resume.check_resume(str(folder), {'seed': 7, 'rounds': 10}, may_differ=())
  assert str(e.value).startswith(f'{folder} holds a run with other settings, which change what '
                                 'it computes: seed: 0 -> 7.')
  assert f'use a new --output_dir, or delete {folder}' in str(e.value)
  (folder / run_folder.CONFIG_FILE).write_text('seed = 0\nrounds = 10\nmeta_lr = 0.1\n')
  with pytest.raises(run_folder.RunFolderError) as e:   # a key renamed since the run
    resume.check_resume(str(folder), {'seed': 0, 'rounds': 10}, may_differ=())
  assert 'meta_lr: 0.1 -> (not a setting of this version)' in str(e.value)
  assert f'python -m research.rename_config_keys {folder}' in str(e.value)
  (folder / run_folder.CONFIG_FILE).write_bytes(b'\xff seed = [')
  with pytest.raises(run_folder.RunFolderError, match='config.toml .* cannot be read'):
    resume.check_resume(str(folder), {'seed': 0}, may_differ=())
  assert sorted(p.name for p in folder.iterdir()) == [run_folder.CONFIG_FILE]


@pytest.mark.parametrize('reader, name', [(run_folder.read_config, run_folder.CONFIG_FILE),
                                          (run_folder.read_results, run_folder.RESULTS_FILE),
                                          (run_folder.read_metrics, run_folder.METRICS_FILE)])
def test_a_file_without_read_permission_is_not_called_damaged(tmp_path, monkeypatch, reader,
                                                              name):
  """A refused read is the machine's (cli.guard names a missing permission), not a bad file.
  Root reads any file whatever its mode, so the refusal is made by `open`."""
  folder = _write_run(tmp_path / 'run')
  real_open = open

  def refusing_open(path, *args, **kwargs):
    if str(path).endswith(name):
      raise PermissionError(13, 'Permission denied', str(path))
    return real_open(path, *args, **kwargs)

  monkeypatch.setattr('builtins.open', refusing_open)
  with pytest.raises(PermissionError):
    reader(str(folder))
