"""Every program ends a bad input with one `error:` line, a non-zero exit and no traceback.

Issue 16: corrupt or truncated files of every kind the programs read
(configs, checkpoints, client states, metric CSVs, data files, run folders),
paths of the wrong kind or not writable, bad flag values, and a run folder of
another configuration. Each case also checks that nothing already written
changed (bytes equal). The programs run through `program_runner` (`program_client.Runner`; a forked
`python -m programs.X` each, TensorFlow imported once); a few cases also run
as plain `python -m` subprocesses.
"""

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, REPO
from tests.data.sql_client_data import write_emnist_file
from tests.helpers import folder_held_by_another_run, program_env
from tests.programs.program_client import Runner, assert_clean_error, snapshot

pytestmark = pytest.mark.slow   # runs programs as subprocesses

TRAIN = ['--config=configs/demo/digits.toml', '--progress=false', '--rounds=2', '--eval_every=1',
         '--checkpoint_every=1', '--clients_per_round=3']
STATEFUL = ['--config=configs/report003/digits.toml', '--algorithm=fedper', '--progress=false',
            '--rounds=2', '--eval_every=1', '--checkpoint_every=1']


@pytest.fixture(scope='module')
def runner():
  r = Runner()
  yield r
  r.close()


def write(path, content):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb' if isinstance(content, bytes) else 'w') as f:
    f.write(content)
  return path


# --------------------------------------------------------------------------- configs and flags

GOOD = open(os.path.join(REPO, 'configs/demo/digits.toml')).read()
CONFIGS = {
    'missing': (None, 'does not exist'),
    'truncated': (GOOD[:GOOD.index('[hparams]') + 5], 'malformed TOML'),
    'binary': (b'\xff\xfe\x00\x81garbage', 'malformed TOML'),
    'empty_table_name': (GOOD + '\n[ ]\n', 'malformed TOML'),
    'unknown_key': ('roundz = 3\n' + GOOD, "unknown key 'roundz'"),
    'wrong_type': (GOOD.replace('rounds = 300', 'rounds = "many"'), 'rounds: expected a int'),
    'bool_for_int': (GOOD.replace('rounds = 300', 'rounds = true'), 'rounds: expected a int'),
    'table_for_scalar': ('[name]\nx = 1\n', 'name: expected a str'),
    'scalar_for_table': ('data = 3\n', 'data must be a table'),
    'method_table_wrong': ('[method_hparams]\nfedavg = 3\n', 'method_hparams.fedavg must be a table'),
    'unknown_model_option': (GOOD.replace('hidden_units', 'hidden'),
                             "[model_options] for model 'mlp'"),
    'bad_model_option': (GOOD.replace('hidden_units = [64]', 'hidden_units = [-3]'),
                         "model 'mlp' with [model_options]"),
    'unknown_hparam': ('[hparams]\nlearning_rate = 0.1\n', "unknown [hparams] key 'learning_rate'"),
    'negative_rounds': (GOOD.replace('rounds = 300', 'rounds = -3'), 'rounds must be >= 1'),
    'nan_fraction': (GOOD.replace('support_fraction = 0.2', 'support_fraction = nan'),
                     'support_fraction'),
    'inf_lr': (GOOD.replace('client_lr = 0.1', 'client_lr = inf'), 'client_lr must be a finite'),
    'bad_split': ('client_split = [0.5, 0.5]\n', 'client_split must be 3 fractions'),
    'unknown_algorithm': ('algorithm = "fedmaml"\n', "Unknown algorithm 'fedmaml'"),
    'unknown_dataset': ('dataset = "mnist2"\n', "Unknown dataset 'mnist2'"),
    'unknown_model': ('model = "resnet"\n', "Unknown model 'resnet'"),
    'unknown_optimizer': ('[hparams]\nserver_optimizer = "lamb"\n', 'lamb'),
    'bad_weighting': ('[hparams]\nweighting = "size"\n', 'hparams.weighting must be one of'),
}


@pytest.mark.parametrize('case', sorted(CONFIGS))
def test_bad_config_file(runner, tmp_path, case):
  content, expect = CONFIGS[case]
  path = tmp_path / 'c.toml'
  if content is not None:
    write(path, content)
  before = snapshot(tmp_path)
  proc = runner.run('programs.train', f'--config={path}', f'--output_dir={tmp_path / "out"}')
  assert_clean_error(proc, expect, before)
  assert not (tmp_path / 'out').exists()


def test_config_that_is_a_folder(runner, tmp_path):
  assert_clean_error(runner.run('programs.train', f'--config={tmp_path}'), 'is a folder')


FLAGS = {
    'zero_rounds': (['--rounds=0'], 'rounds must be >= 1'),
    'text_rounds': (['--rounds=ten'], '--rounds: expected a int'),
    'nan_support': (['--support_fraction=nan'], 'support_fraction must be a finite number'),
    'negative_lr': (['--client_lr=-1'], 'client_lr must be > 0'),
    'negative_seed': (['--seed=-1'], 'seed must be >= 0'),
    'short_split': (['--client_split=0.9,0.1'], 'client_split must be 3 fractions'),
    'text_split': (['--client_split=a,b,c'], '--client_split: expected a tuple'),
    'final_eval_rounds': (['--final_eval_rounds=5', '--rounds=2'], 'final_eval_rounds must be in'),
    'unknown_algorithm': (['--algorithm=fedmaml'], "Did you mean 'fedmeta_maml'"),
    'unknown_flag': (['--roundz=3'], 'Unknown command line flag'),
    'stray_argument': (['extra'], 'Unexpected arguments'),
    'bad_bool': (['--progress=maybe'], 'progress'),
    'bad_executor': (['--executor=gpu'], 'executor'),
    'zero_workers': (['--executor=local', '--local_workers=0'], 'local_workers'),
    'zero_concurrent_calls': (['--max_concurrent_calls=0'],
                              'max_concurrent_calls must be -1 (no bound) or >= 1, got 0'),
    'workers_without_addresses': (['--executor=workers'], '--executor=workers needs --workers'),
    'bad_worker_address': (['--executor=workers', '--workers=localhost'], 'is not host:port'),
}


@pytest.mark.parametrize('case', sorted(FLAGS))
def test_bad_flag(runner, tmp_path, case):
  args, expect = FLAGS[case]
  proc = runner.run('programs.train', *TRAIN, f'--output_dir={tmp_path / "out"}', *args)
  assert_clean_error(proc, expect)


# --------------------------------------------------------------------------- output paths

def test_more_clients_per_round_than_training_clients(runner, tmp_path):
  """Refused before anything is written, not silently capped (digits: 80 training clients)."""
  proc = runner.run('programs.train', *TRAIN, '--clients_per_round=81',
                    f'--output_dir={tmp_path}/o')
  assert_clean_error(proc, 'clients_per_round = 81 is more than the 80 training clients of '
                     'digits')
  assert not os.path.exists(tmp_path / 'o')


def test_output_dir_is_a_file(runner, tmp_path):
  out = write(str(tmp_path / 'out'), 'precious')
  before = snapshot(out)
  proc = runner.run('programs.train', *TRAIN, f'--output_dir={out}')
  assert_clean_error(proc, 'is a file', before)


def test_output_dir_below_a_file(runner, tmp_path):
  blocker = write(str(tmp_path / 'blocker'), 'precious')
  before = snapshot(blocker)
  proc = runner.run('programs.train', *TRAIN, f'--output_dir={blocker}/run')
  assert_clean_error(proc, f'{blocker}/run', before)


def test_output_dir_not_writable(runner):
  proc = runner.run('programs.train', *TRAIN, '--output_dir=/proc/tff_meta_run')
  assert_clean_error(proc, '/proc/tff_meta_run')


def test_compare_output_dir_is_a_file(runner, tmp_path):
  out = write(str(tmp_path / 'out'), 'precious')
  before = snapshot(out)
  proc = runner.run('programs.compare', *TRAIN, '--algorithms=fedavg', f'--output_dir={out}')
  assert_clean_error(proc, 'is a file', before)


# --------------------------------------------------------------------------- data files

def _sqlite(path, sql):
  conn = sqlite3.connect(path)
  conn.executescript(sql)
  conn.commit()
  conn.close()


def test_emnist_sqlite_that_is_not_sqlite(runner, tmp_path):
  path = write(str(tmp_path / 'tff' / 'emnist_all.sqlite'), b'SQLite format 2\x00' + b'\x07' * 500)
  before = snapshot(tmp_path)
  proc = runner.run('programs.train', *TRAIN, '--dataset=emnist', '--model=femnist_cnn',
                    f'--cache_dir={tmp_path / "tff"}', f'--output_dir={tmp_path / "out"}')
  assert_clean_error(proc, path, before)


def test_emnist_sqlite_with_another_schema(runner, tmp_path):
  path = str(tmp_path / 'tff' / 'emnist_all.sqlite')
  os.makedirs(os.path.dirname(path))
  _sqlite(path, 'CREATE TABLE people (name TEXT); INSERT INTO people VALUES ("a");')
  before = snapshot(tmp_path)
  proc = runner.run('programs.train', *TRAIN, '--dataset=emnist', '--model=femnist_cnn',
                    f'--cache_dir={tmp_path / "tff"}', f'--output_dir={tmp_path / "out"}')
  assert_clean_error(proc, path, before)


def test_emnist_sqlite_that_is_empty(runner, tmp_path):
  path = write(str(tmp_path / 'tff' / 'emnist_all.sqlite'), b'')
  proc = runner.run('programs.data', '--dataset=emnist', f'--cache_dir={tmp_path / "tff"}')
  assert_clean_error(proc, path)


@pytest.mark.parametrize('content', ['{"users": ["f0"], "num_samples": [2], "user_data": {"f0": {"x',
                                     '', '[1, 2]', '\x00\x01binary'])
def test_leaf_json_damaged(runner, tmp_path, content):
  path = write(str(tmp_path / 'leaf' / 'all_data' / 'all_data_0.json'), content)
  proc = runner.run('programs.data', '--dataset=leaf_femnist',
                    f'--data_option=path={tmp_path / "leaf" / "all_data"}')
  assert_clean_error(proc, 'all_data_0.json')


def _movielens(folder, ratings):
  write(os.path.join(folder, 'u.user'), '1|24|M|technician|85711\n2|53|F|other|94043\n')
  genres = '|'.join(['0'] * 19)
  write(os.path.join(folder, 'u.item'), f'1|Toy Story (1995)|01-Jan-1995||http://x|{genres}\n')
  return write(os.path.join(folder, 'u.data'), ratings)


@pytest.mark.parametrize('ratings, expect', [
    ('1\t1\t5\n', 'line 1'), ('1\t1\tfive\t881250949\n', 'line 1'), ('', 'no ratings'),
    ('1\t1\t5\t8812\n1\t1\t9\t8812\n', 'line 2'), (b'\xff\xfe\x00\x00', 'u.data')])
def test_movielens_u_data_malformed(runner, tmp_path, ratings, expect):
  path = _movielens(str(tmp_path / 'ml'), ratings)
  proc = runner.run('programs.data', '--dataset=movielens',
                    f'--data_option=path={tmp_path / "ml"}')
  line = assert_clean_error(proc, expect)
  assert path in line


@pytest.mark.parametrize('option, expect', [
    ('num_clients', 'key=value'), ('num_clients=-4', 'num_clients'),
    ('bogus_option=1', 'bogus_option'), ('path=/nonexistent', None)])
def test_data_stats_bad_option(runner, option, expect):
  proc = runner.run('programs.data', '--dataset=digits', f'--data_option={option}')
  assert_clean_error(proc, expect)



# --------------------------------------------------------------------------- the data check

def _leaf_with_nan(folder, twice=False):
  row = [0.5] * 784
  bad = row[:100] + ['NAN'] + row[101:]
  users = [f'u{i}' for i in range(12)]
  data = {u: {'x': [row] * 6, 'y': [1, 2, 3, 4, 5, 6]} for u in users}
  data['u3']['x'] = [row] * 3 + [bad] + [row] * 2
  listed = users + ['u5'] if twice else users
  counts = [6] * len(listed)
  text = json.dumps({'users': listed, 'num_samples': counts, 'user_data': data})
  return write(os.path.join(folder, 'all_data_0.json'), text.replace('"NAN"', 'NaN'))


def _leaf_config(tmp_path, path, extra=''):
  return write(str(tmp_path / 'leaf.toml'), f"""
dataset = "leaf_femnist"
model = "mlp"
min_samples = 2
[data]
path = "{path}"
{extra}
[model_options]
hidden_units = [8]
""")


@pytest.mark.parametrize('twice', [False, True])
def test_leaf_shard_with_a_nan_or_a_user_listed_twice(runner, tmp_path, twice):
  """Issue 68: such a shard trained, leaving the writer out every round with a warning."""
  shard = _leaf_with_nan(str(tmp_path / 'leaf'), twice)
  config = _leaf_config(tmp_path, shard)
  before = snapshot(tmp_path / 'leaf')
  out = tmp_path / 'out'
  for _ in range(2):
    proc = runner.run('programs.train', f'--config={config}', '--progress=false', '--rounds=2',
                      '--clients_per_round=2', f'--output_dir={out}')
    line = assert_clean_error(proc, f"{shard}: client 'u3': sample 3 has nan at feature (3, 16)",
                              before)
    assert proc.returncode == 1 and 'drop_bad_clients = true' in line
    assert ('2 clients fail this check' in line) == twice
    assert not out.exists()   # nothing written before the data was checked
  config = _leaf_config(tmp_path, shard, 'drop_bad_clients = true')
  proc = runner.run('programs.train', f'--config={config}', '--progress=false', '--rounds=1',
                    '--clients_per_round=2', '--eval_every=1', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert (f'dropped {2 if twice else 1} client{"s" if twice else ""} that fail the data check'
          in proc.stderr)


@pytest.mark.parametrize('pixel, label, expect', [
    (float('inf'), None, 'example 5 has inf at feature (2, 2) (features must be finite)'),
    (None, 62, "example 5 has label 62, outside the task's classes [0, 62)")])
def test_emnist_client_found_bad_mid_run_stops_before_that_rounds_state(
    runner, tmp_path, pixel, label, expect):
  """EMNIST is read on demand: client w07 is first read in round 8 (seed 0), which stops the
  run there; rounds 1-7 are saved, round 8 is not."""
  path = write_emnist_file(str(tmp_path / 'tff'), 20, 12, 'w07', pixel, label, bad_image=5,
                           test_images=2)
  out = tmp_path / 'out'
  args = ['--dataset=emnist', '--model=mlp', f'--cache_dir={tmp_path / "tff"}', '--no_download',
          '--rounds=8', '--clients_per_round=2', '--eval_every=100', '--checkpoint_every=1',
          '--progress=false', f'--output_dir={out}']
  proc = runner.run('programs.train', '--config=configs/demo/digits.toml', *args)
  assert_clean_error(proc, f"{path}: client 'w07': {expect}")
  assert sorted(os.listdir(out / 'checkpoints'))[-1] == 'program_state_7'
  with open(out / 'metrics.csv') as f:
    assert [line.split(',')[0] for line in f][-1] == '7'


# --------------------------------------------------------------------------- checkpoints

@pytest.fixture(scope='module')
def trained(runner, tmp_path_factory):
  """A finished 2-round FedAvg run with checkpoints at rounds 1 and 2."""
  out = tmp_path_factory.mktemp('trained') / 'run'
  proc = runner.run('programs.train', *TRAIN, '--algorithm=fedavg', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert sorted(os.listdir(out / 'checkpoints')) == ['program_state_1', 'program_state_2']
  return out


def _truncate(path, size):
  with open(path, 'r+b') as f:
    f.truncate(size)


def _empty_folder(path):
  shutil.rmtree(path)
  os.makedirs(path)


def _file_for_folder(path):
  shutil.rmtree(path)
  write(path, 'not a checkpoint')


STATE2 = 'checkpoints/program_state_2'
DAMAGE = {
    'emptied': (lambda out: _empty_folder(out / STATE2), 'program_state_2 cannot be read'),
    'truncated_graph': (lambda out: _truncate(out / STATE2 / 'saved_model.pb', 60),
                        'program_state_2 cannot be read'),
    'truncated_variables': (
        lambda out: _truncate(out / STATE2 / 'variables/variables.data-00000-of-00001', 10),
        'program_state_2 cannot be read'),
    'garbage_graph': (lambda out: write(out / STATE2 / 'saved_model.pb', os.urandom(3000)),
                      'program_state_2 cannot be read'),
    'version_is_a_file': (lambda out: _file_for_folder(out / STATE2),
                          'program_state_2 cannot be read'),
    'checkpoints_is_a_file': (lambda out: _file_for_folder(out / 'checkpoints'),
                              'checkpoints is a file'),
    'metrics_garbage': (lambda out: write(out / 'metrics.csv', b'\x00\xff\xfe' * 50),
                        'metrics.csv'),
    'metrics_torn_row': (lambda out: write(out / 'metrics.csv', (out / 'metrics.csv').read_text()
                                           + '3,0.5,0.'), 'metrics.csv, line'),
    'eval_no_round_column': (lambda out: write(out / 'eval.csv', 'a,b\n1,2\n'),
                             "eval.csv has no 'round' column"),
    'eval_is_a_folder': (lambda out: (os.remove(out / 'eval.csv'), os.makedirs(out / 'eval.csv')),
                         'eval.csv'),
    'config_garbage': (lambda out: write(out / 'config.toml', b'\xff\x00 = ['), 'config.toml'),
}


@pytest.mark.parametrize('case', sorted(DAMAGE))
def test_damaged_run_folder(runner, trained, tmp_path, case):
  damage, expect = DAMAGE[case]
  out = tmp_path / 'run'
  shutil.copytree(trained, out)
  damage(out)
  before = snapshot(out)
  proc = runner.run('programs.train', *TRAIN, '--algorithm=fedavg', '--rounds=3',
                    f'--output_dir={out}')
  line = assert_clean_error(proc, expect, before)
  if 'program_state_2 cannot be read' in line:   # the fix names the previous checkpoint
    assert 'resume from round 1' in line


@pytest.mark.parametrize('args, expect', [
    (['--algorithm=fedavg_meta'], "algorithm: 'fedavg' -> 'fedavg_meta'"),   # same state structure
    (['--algorithm=fedmeta_maml'], "algorithm: 'fedavg' -> 'fedmeta_maml'"),
    (['--algorithm=fedavg', '--model=logistic_regression'], "model: 'mlp' -> 'logistic_regression'"),
])
def test_run_folder_of_another_configuration(runner, trained, tmp_path, args, expect):
  out = tmp_path / 'run'
  shutil.copytree(trained, out)
  cfg = write(str(tmp_path / 'c.toml'), GOOD.replace('hidden_units = [64]', ''))
  before = snapshot(out)
  proc = runner.run('programs.train', *TRAIN, f'--config={cfg}', '--rounds=3', *args,
                    f'--output_dir={out}')
  assert_clean_error(proc, expect, before)


def _hashes(folder):
  """path -> sha256 of every file under `folder`, its .lock included."""
  out = {}
  for root, _, names in os.walk(folder):
    for name in names:
      with open(os.path.join(root, name), 'rb') as f:
        out[os.path.join(root, name)] = hashlib.sha256(f.read()).hexdigest()
  return out


@pytest.mark.parametrize('args, expect', [
    (['--seed=7'], 'seed: 0 -> 7'),   # resumed, scored on other test clients, overwrote the files
    (['--rounds=1'], 'rounds: 2 -> 1 (it may only grow)'),
    (['--eval_every=2', '--client_lr=0.05'], 'eval_every: 1 -> 2; hparams.client_lr: 0.3 -> 0.05'),
    (['--support_fraction=0.3', '--resample_support=true'],
     'resample_support: False -> True; support_fraction: 0.2 -> 0.3'),
])
def test_rerun_with_other_settings_is_refused_unchanged(runner, trained, tmp_path, args, expect):
  """A finished run's folder, rerun with settings that change what it computes: one error
  line naming each key (old -> new), every file's bytes as they were (.lock too)."""
  out = tmp_path / 'run'
  shutil.copytree(trained, out)
  before = _hashes(out)
  proc = runner.run('programs.train', *TRAIN, '--algorithm=fedavg', *args, f'--output_dir={out}')
  line = assert_clean_error(proc, expect)
  assert f'{out} holds a run with other settings' in line and 'use a new --output_dir' in line
  assert _hashes(out) == before


def test_rerun_may_change_how_it_runs(runner, trained, tmp_path):
  """Settings of how a run executes may differ; more rounds extend it."""
  out = tmp_path / 'run'
  shutil.copytree(trained, out)
  proc = runner.run('programs.train', *TRAIN, '--algorithm=fedavg', '--rounds=3',
                    '--checkpoint_every=2', '--resident_state=false', '--name=other',
                    '--max_concurrent_calls=2', '--local_workers=1', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'Resuming FedAvg from round 2' in proc.stderr


FULL_DISK_AT_ROUND_2 = """
import runpy, sys
import tensorflow as tf
import tensorflow_federated as tff
save = tff.program.FileProgramStateManager.save
async def full_disk_at_round_2(self, state, version):
  if version == 2:   # TensorFlow's own error for a full disk while it saves a checkpoint
    raise tf.errors.ResourceExhaustedError(None, None, (
        f'{self._root_dir}/program_state_2_temp/variables/variables.data-00000-of-00001'
        '.tempstate1; No space left on device [Op:SaveV2]'))
  return await save(self, state, version)
tff.program.FileProgramStateManager.save = full_disk_at_round_2
sys.argv = ['train', *sys.argv[1:]]
runpy.run_module('programs.train', run_name='__main__', alter_sys=True)
"""


def test_full_disk_is_named_and_the_run_resumes_on_another_disk(trained, tmp_path):
  """The disk fills while the round-2 checkpoint is saved: one error line naming the full disk,
  the file and the folder, exit 1; the folder moved to a disk with room resumes from round 1
  and ends with the uninterrupted run's results."""
  out = tmp_path / 'full' / 'run'
  proc = subprocess.run([sys.executable, '-c', FULL_DISK_AT_ROUND_2, *TRAIN, '--algorithm=fedavg',
                         f'--output_dir={out}'], cwd=REPO, env=program_env(), capture_output=True,
                        text=True, timeout=600)
  line = assert_clean_error(proc, 'No space left on device (ResourceExhaustedError); the disk is '
                            'full; free space, then rerun the same command')
  assert f'{out}/checkpoints/program_state_2_temp' in line and f'(output folder {out})' in line
  assert proc.returncode == 1
  roomy = tmp_path / 'roomy' / 'run'
  shutil.copytree(out, roomy)
  proc = subprocess.run([sys.executable, '-m', 'programs.train', *TRAIN, '--algorithm=fedavg',
                         f'--output_dir={roomy}'], cwd=REPO, env=program_env(),
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'Resuming FedAvg from round 1' in proc.stderr
  got, want = (json.loads((d / 'results.json').read_text()) for d in (roomy, trained))
  assert got['test_client_accuracies'] == want['test_client_accuracies']
  scores = lambda history: [{k: v for k, v in h.items() if k != 'worker_rss_mb'} for h in history]
  assert scores(got['history']) == scores(want['history'])


def test_run_folder_in_use_by_another_run(runner, trained, tmp_path):
  """A second writer of one run folder (the resume command started twice) stops at once."""
  out = tmp_path / 'run'
  shutil.copytree(trained, out)
  with folder_held_by_another_run(out) as holder_pid:
    before = snapshot(out)
    proc = runner.run('programs.train', *TRAIN, '--algorithm=fedavg', '--rounds=3',
                      f'--output_dir={out}')
    assert_clean_error(proc, f'{out}: another run (PID {holder_pid}) is writing this output '
                       'folder; wait for it to end', before)


def test_checkpoint_of_another_model_size(runner, trained, tmp_path):
  """Same algorithm and model name, other layer sizes: caught by the state's shapes."""
  out = tmp_path / 'run'
  shutil.copytree(trained, out)
  os.remove(out / 'config.toml')   # no saved config to compare: the checkpoint itself must tell
  cfg = write(str(tmp_path / 'wide.toml'), GOOD.replace('hidden_units = [64]', 'hidden_units = [32]'))
  before = snapshot(out)
  proc = runner.run('programs.train', *TRAIN, f'--config={cfg}', '--algorithm=fedavg',
                    '--rounds=3', f'--output_dir={out}')
  assert_clean_error(proc, 'does not match FedAvg', before)


def test_interrupted_checkpoint_save_is_ignored(runner, trained, tmp_path):
  """A kill during TFF's save leaves only a `_temp` folder; the next run resumes past it."""
  out = tmp_path / 'run'
  shutil.copytree(trained, out)
  write(out / 'checkpoints' / 'program_state_3_temp1234' / 'saved_model.pb', b'half')
  write(out / '.results.json.x1y2.tmp', '{"summ')   # a killed atomic write's leftover
  proc = runner.run('programs.train', *TRAIN, '--algorithm=fedavg', '--rounds=3',
                    f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'Resuming FedAvg from round 2' in proc.stderr
  assert json.loads((out / 'results.json').read_text())['summary']['rounds'] == 3


# --------------------------------------------------------------------------- client states

@pytest.fixture(scope='module')
def stateful(runner, tmp_path_factory):
  out = tmp_path_factory.mktemp('stateful') / 'run'
  proc = runner.run('programs.train', *STATEFUL, f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  return out


def _state_files(out):
  root = out / 'client_states'
  return [root / d / n for d in os.listdir(root) if os.path.isdir(root / d)
          for n in os.listdir(root / d)]


@pytest.mark.parametrize('damage, expect', [
    (lambda p: _truncate(p, 30), 'cannot be read'),
    (lambda p: write(p, b''), 'cannot be read'),
    (lambda p: write(p, os.urandom(200)), 'cannot be read'),
])
def test_damaged_client_state(runner, stateful, tmp_path, damage, expect):
  out = tmp_path / 'run'
  shutil.copytree(stateful, out)
  for path in _state_files(out):
    damage(path)
  before = snapshot(out)
  proc = runner.run('programs.train', *STATEFUL, '--rounds=4', f'--output_dir={out}')
  line = assert_clean_error(proc, expect, before)
  assert 'client_states' in line and 'Client state' in line


# --------------------------------------------------------------------------- other programs

def test_compare_bad_inputs(runner, tmp_path):
  assert_clean_error(runner.run('programs.compare', *TRAIN, '--algorithms=fedavg,nope',
                                f'--output_dir={tmp_path}/o'), "Unknown algorithm 'nope'")
  assert_clean_error(runner.run('programs.compare', *TRAIN, '--seeds=0',
                                f'--output_dir={tmp_path}/o'), '--seeds must be >= 1')


@pytest.mark.parametrize('grid, expect', [
    ('client_lr', 'is not key=v1,v2'), ('nope=1,2', 'nope'), ('client_lr=a,b', 'client_lr'),
    ('rounds=0', 'rounds must be >= 1')])
def test_sweep_bad_grid(runner, tmp_path, grid, expect):
  proc = runner.run('programs.sweep', '--config=configs/demo/digits.toml', f'--grid={grid}',
                    f'--output_dir={tmp_path}/o')
  assert_clean_error(proc, expect)


@pytest.mark.parametrize('seeds', ['x', '-1', '0,a'])
def test_sweep_bad_seeds(runner, tmp_path, seeds):
  proc = runner.run('programs.sweep', '--config=configs/demo/digits.toml',
                    '--grid=client_lr=0.1', f'--seeds={seeds}', f'--output_dir={tmp_path}/o')
  assert_clean_error(proc, '--seeds must be integers')


def test_sweep_needs_a_grid(runner):
  assert_clean_error(runner.run('programs.sweep'), 'grid')


@pytest.mark.parametrize('args, expect', [
    (['--methods=nope'], "unknown method 'nope'"), (['--seeds=-1'], '--seeds must be integers'),
    (['--seeds=a'], '--seeds must be integers'), (['--datasets=mnist'], 'no config'),
    (['--rounds=-2', '--datasets=femnist', '--supports=20', '--methods=fedavg'],
     'rounds must be >= 1')])
def test_reproduce_bad_flags(runner, args, expect):
  assert_clean_error(runner.run('programs.reproduce', *args), expect)


def test_reproduce_damaged_paper_table(runner, tmp_path):
  write(str(tmp_path / 'paper_table2.toml'), '[femnist\n')
  assert_clean_error(runner.run('programs.reproduce', f'--config_dir={tmp_path}'), 'malformed TOML')
  os.remove(tmp_path / 'paper_table2.toml')
  assert_clean_error(runner.run('programs.reproduce', f'--config_dir={tmp_path}'), 'does not exist')


@pytest.mark.parametrize('args, expect', [
    (['--config=/nonexistent.toml'], 'does not exist'),
    (['--config=configs/recommend/movielens_p80.toml', '--data_path=/nonexistent/ml'],
     '/nonexistent/ml'),
    (['--config=configs/recommend/movielens_p80.toml', '--model=mlp'], 'model must be one of'),
    (['--config=configs/recommend/movielens_p80.toml', '--rating_init=zeros'],
     'rating_init must be one of keras, bias'),
    (['--config=configs/recommend/movielens_p80.toml', '--validation_fraction=1'],
     'validation_fraction must be in [0, 1)')])
def test_recommend_bad_inputs(runner, tmp_path, args, expect):
  assert_clean_error(runner.run('programs.train', *args, f'--output_dir={tmp_path}/o'), expect)


def test_recommend_malformed_movielens(runner, tmp_path):
  path = _movielens(str(tmp_path / 'ml'), '1\t1\t5\n')
  proc = runner.run('programs.train', '--config=configs/recommend/movielens_p80.toml',
                    f'--data_path={tmp_path / "ml"}', f'--output_dir={tmp_path}/o')
  assert_clean_error(proc, path)


FEW = 'configs/fewround/femnist62_5way_iid.toml'


@pytest.mark.parametrize('args, expect', [
    (['--methods=nope'], 'nope'), (['--config=/nonexistent.toml'], 'does not exist'),
    ([f'--data_path=/nonexistent/leaf'], '/nonexistent/leaf'), (['--test_rounds=0'], 'test_rounds'),
    (['--data_path=/nonexistent/tff', '--no_download'],
     "'/nonexistent/tff/emnist_all.sqlite' (downloading is off"),
    (['--n_way=abc'], 'n_way'),
    # Requests the class split cannot meet (FEMNIST-62 as 40 / 10 / 12 classes), before any write.
    (['--n_way=13', '--examples_per_class=6', f'--data_path={FIXTURES}/tff'],
     'n_way = 13 needs 13 classes per episode, but the test part'),
    (['--n_way=11', '--select_every=50', '--examples_per_class=6', f'--data_path={FIXTURES}/tff'],
     'but the validation part'),
    (['--examples_per_class=8', f'--data_path={FIXTURES}/tff'], 'examples_per_class = 8, but')])
def test_few_round_bad_inputs(runner, tmp_path, args, expect):
  proc = runner.run('programs.train', f'--config={FEW}', *args, f'--output_dir={tmp_path}/o')
  assert_clean_error(proc, expect)
  assert not os.path.exists(tmp_path / 'o')   # refused before the run folder is made


@pytest.mark.parametrize('args, expect', [
    ([], 'at least one --grid'), (['--grid=inner_lr'], 'KEY=V1,V2'),
    (['--grid=methods=a,b'], 'not a sweepable'), (['--grid=inner_lr=x,y'], 'inner_lr'),
    (['--grid=meta_lr=0.1,0.01'], "'meta_lr' is not a sweepable config key")])
def test_few_round_sweep_bad_grid(runner, tmp_path, args, expect):
  proc = runner.run('programs.sweep', f'--config={FEW}', *args,
                    f'--output_dir={tmp_path}/o')
  assert_clean_error(proc, expect)


@pytest.mark.parametrize('args, expect', [
    (['--runs=/nonexistent'], 'not a folder'), (['--output_dir=/tmp'], 'runs'),
])
def test_report_bad_flags(runner, tmp_path, args, expect):
  if not any(a.startswith('--output_dir') for a in args):
    args = [*args, f'--output_dir={tmp_path}/r']
  assert_clean_error(runner.run('programs.report', *args), expect)


@pytest.mark.parametrize('damage, expect', [
    (lambda out: write(out / 'results.json', '{"summary": {"meth'), 'results.json'),
    (lambda out: write(out / 'results.json', b'\xff\xfe'), 'results.json'),
    (lambda out: write(out / 'metrics.csv', 'round,bytes_down\n1,x\n'), 'metrics.csv'),
    (lambda out: os.remove(out / 'eval.csv'), None),
    (lambda out: write(out / 'config.toml', 'seed = ['), 'config.toml'),
])
def test_report_damaged_run_folder(runner, trained, tmp_path, damage, expect):
  out = tmp_path / 'runs' / 'run'
  shutil.copytree(trained, out)
  damage(out)
  before = snapshot(tmp_path)
  proc = runner.run('programs.report', f'--runs={tmp_path / "runs"}',
                    f'--output_dir={tmp_path / "report"}')
  if proc.returncode == 0:   # a run that can be reported without the file is fine too
    assert 'Traceback' not in proc.stderr
    return
  assert_clean_error(proc, expect, before)


def test_report_output_dir_below_a_file(runner, trained, tmp_path):
  blocker = write(str(tmp_path / 'blocker'), 'precious')
  before = snapshot(blocker)
  proc = runner.run('programs.report', f'--runs={trained}', f'--output_dir={blocker}/r')
  assert_clean_error(proc, blocker, before)


@pytest.mark.parametrize('args, expect', [
    (['--port=-1'], 'port'), (['--port=70000'], 'port'), (['--port=abc'], 'port'),
    (['--max_concurrent_calls=0'], 'max_concurrent_calls must be -1 (no bound) or >= 1')])
def test_worker_bad_port(runner, args, expect):
  assert_clean_error(runner.run('programs.worker', *args), expect)


# --------------------------------------------------------------------------- as users run them

@pytest.mark.parametrize('module, args, expect', [
    ('programs.train', ['--config=/nonexistent.toml'], 'does not exist'),
    ('programs.report', ['--runs=/nonexistent', '--output_dir=/tmp/x'], 'not a folder'),
    ('programs.worker', ['--port=-1'], 'port'),
])
def test_python_m_entry_points(tmp_path, module, args, expect):
  proc = subprocess.run([sys.executable, '-m', module, *args], cwd=REPO, env=program_env(),
                        capture_output=True, text=True, timeout=600)
  assert_clean_error(proc, expect)
