"""The long-run, scoring and selection scripts of configs/, dry-run.

They run for many sessions in the background, so a typo in a cell costs a
session of compute. Each script runs here with PY=echo: every cell's
command is printed instead of run, and each must name configs that exist,
flags the program defines, and (for the queue) a Table 2 cell config.
"""

import os
import re
import shlex
import subprocess

import pytest

from tests.research.queue_fakes import parse_flags
from tests.research.queue_fakes import recorded_calls
from tests.research.queue_fakes import run_queue
from tff_meta.core import config_file
from tff_meta.fewround.config import FewRoundConfig
from tff_meta.classification import config as program_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _dry_run(script, tmp_path, **env):
  """The commands `script` would run (PY=echo), as argument lists after the module name."""
  out = subprocess.run(
      ['bash', os.path.join(ROOT, script)], capture_output=True, text=True, timeout=60,
      env={**os.environ, 'PY': 'echo', 'NICE': '0', **env}, cwd=tmp_path, check=False)
  assert out.returncode == 0, out.stderr
  commands = [shlex.split(line) for line in out.stdout.splitlines() if line.startswith('-m ')]
  assert commands, out.stdout
  return commands


def _known(cls):
  return {f.name for f in config_file.scalar_fields(cls)}


def test_table2_queue_names_existing_cells(tmp_path):
  commands = _dry_run('research/queues/table2_queue.sh', tmp_path, OUT=str(tmp_path / 'out'),
                      SKIP_COMMITTED='0')
  reproduce = [c for c in commands if c[1] == 'programs.reproduce']
  train = [c for c in commands if c[1] == 'programs.train']
  assert len(reproduce) == 15 and len(train) == 9
  for command in reproduce:
    flags = parse_flags(command[2:])
    assert set(flags) <= {'progress', 'datasets', 'cache_dir', 'output_root', 'supports',
                          'seeds', 'methods'}, flags
    cell = f"table2_{flags['datasets']}_p{flags['supports']}_{flags['methods']}.toml"
    assert os.path.exists(os.path.join(ROOT, 'configs/fedmeta', cell)), cell
    # FedAvg's and FedAvg(Meta)'s other columns are scored from the 20% runs (other_supports.sh)
    assert flags['supports'] == '20' or not flags['methods'].startswith('fedavg'), flags
  known = {*program_config.TOP_LEVEL, *program_config.HPARAMS, 'cache_dir', 'progress'}
  runs = [parse_flags(c[2:]) for c in train]
  for flags in runs:
    assert os.path.exists(os.path.join(ROOT, flags['config'])), flags['config']
    assert set(flags) - {'config'} <= known, set(flags) - known
  assert [f.get('weighting') for f in runs] == [None, None, None, 'uniform'] + [None] * 5
  assert [f.get('resample_support') for f in runs] == [None, None, 'true', None] + ['true'] * 5
  assert [os.path.basename(f['config']) for f in runs[:2]] == [
      'table2_shakespeare_p20_maml_reduced.toml', 'table2_shakespeare_p20_fedavg_reduced.toml']
  # step 8: every other seed-0 meta-learner cell once more with resampling, each in its own folder
  resampled = [(os.path.basename(f['config']), os.path.basename(f['output_dir'])) for f in runs[4:]]
  assert [c for c, _ in resampled] == [
      'table2_femnist_p90_maml.toml', 'table2_femnist_p50_metasgd.toml',
      'table2_femnist_p50_maml.toml', 'table2_femnist_p20_metasgd.toml',
      'table2_femnist_p20_maml.toml']
  assert all(out == c[:-len('.toml')] + '_resampled' for c, out in resampled)
  assert len({f['output_dir'] for f in runs}) == 9


def _queue_cell_name(command):
  if command[1] == 'programs.train':
    return os.path.basename(parse_flags(command[2:])['output_dir'])
  flags = parse_flags(command[2:])
  name = f"table2_{flags['datasets']}_p{flags['supports']}_{flags['methods']}"
  return name if flags['seeds'] == '0' else f"{name}_seed{flags['seeds']}"


def test_table2_queue_skips_the_cells_committed_in_docs_runs(tmp_path):
  every = [_queue_cell_name(c) for c in _dry_run(
      'research/queues/table2_queue.sh', tmp_path, OUT=str(tmp_path / 'out'), SKIP_COMMITTED='0')]
  committed = {name for name in every if os.path.exists(
      os.path.join(ROOT, 'docs/runs/fedmeta', name, 'results.json'))}
  assert committed   # the finished 20% column is in docs/runs/fedmeta
  out = subprocess.run(['bash', os.path.join(ROOT, 'research/queues/table2_queue.sh')],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path, check=True,
                       env={**os.environ, 'PY': 'echo', 'NICE': '0', 'OUT': str(tmp_path)})
  left = [_queue_cell_name(shlex.split(line)) for line in out.stdout.splitlines()
          if line.startswith('-m ')]
  assert left == [name for name in every if name not in committed]
  assert sum(line.startswith('skip ') for line in out.stdout.splitlines()) == len(committed)


def test_long_run_cells_name_existing_configs_and_known_flags(tmp_path):
  commands = _dry_run('research/queues/long_run.sh', tmp_path, SEEDS='0 1',
                      OUT=str(tmp_path / 'out'), SKIP_COMMITTED='0')
  known = _known(FewRoundConfig) | {'config', 'data_path', 'progress'}
  for command in commands:
    assert command[1] == 'programs.train'
    flags = parse_flags(command[2:])
    assert os.path.exists(os.path.join(ROOT, flags['config'])), flags['config']
    assert set(flags) <= known, set(flags) - known
  folders = [parse_flags(c[2:])['output_dir'] for c in commands]
  assert len(folders) == len(set(folders))                   # no two cells share a folder
  # non-IID, per seed: baselines, one-shot, FRL with P_R, FRL, personalization; FRL with P_{R-1}
  noniid = [os.path.relpath(f, tmp_path / 'out' / 'noniid') for f in folders if '/noniid/' in f]
  assert noniid == [f'{cell}/seed{s}' for s in '01' for cell in (
      'baselines', 'oneshot', 'frl_tau_pr', 'frl', 'personalized')] + ['frl_tau/seed0',
                                                                       'frl_tau/seed1']
  tau = [parse_flags(c[2:]) for c in commands if '/frl_tau/' in parse_flags(c[2:])['output_dir']]
  assert [(f['methods'], f['temperature']) for f in tau] == [('frl_distance', 'learned')] * 4
  pr = [parse_flags(c[2:]) for c in commands if '/frl_tau_pr/' in parse_flags(c[2:])['output_dir']]
  assert [(f['seed'], f['temperature'], f['train_prototypes']) for f in pr] == [
      ('0', 'learned', 'recomputed'), ('1', 'learned', 'recomputed')] * 2
  by_cell = {os.path.relpath(parse_flags(c[2:])['output_dir'], tmp_path / 'out'): parse_flags(c[2:])
             for c in commands}
  for setting in ('', 'noniid/'):   # the same methods in both settings
    assert by_cell[f'{setting}oneshot/seed1']['methods'] == 'finetune_oneshot'
    assert by_cell[f'{setting}personalized/seed1']['methods'] == 'personalized'
  assert all(f.get('iid') == ('false' if cell.startswith('noniid/') else None)
             for cell, f in by_cell.items())


@pytest.mark.slow
def test_long_run_skips_the_cells_committed_at_its_length(tmp_path):
  def folders(**env):
    return [parse_flags(c[2:])['output_dir'] for c in _dry_run(
        'research/queues/long_run.sh', tmp_path, OUT=str(tmp_path), **env)]
  every = folders(SKIP_COMMITTED='0')
  committed = [f for f in every if os.path.exists(os.path.join(
      ROOT, 'docs/runs/fewround_long', os.path.relpath(f, tmp_path), 'results.json'))]
  assert len(committed) >= 3   # the IID cells of issue #14 are committed
  assert folders() == [f for f in every if f not in committed]
  assert folders(EPISODES='2000') == every     # another length is another experiment
  assert folders(EXTRA='--num_clients=2') == every   # a smoke test runs every cell


@pytest.mark.slow   # over the 2 s of a fast test (seconds of shell work)
def test_long_run_skips_the_cells_committed_under_any_committed_root(tmp_path):
  roots = tmp_path / 'repo_a', tmp_path / 'repo_b'
  for root, cell, episodes in ((roots[0], 'frl/seed0', 1000), (roots[1], 'baselines/seed1', 1000),
                               (roots[1], 'frl_tau/seed1', 500)):   # another length: not skipped
    (root / cell).mkdir(parents=True)
    (root / cell / 'results.json').write_text('{}')
    (root / cell / 'config.toml').write_text(f'episodes = {episodes}\n')
  (roots[0] / 'personalized/seed0').mkdir(parents=True)   # unfinished (paused): not skipped
  (roots[0] / 'personalized/seed0/config.toml').write_text('episodes = 1000\n')
  out = tmp_path / 'out'

  def folders(**env):
    return [os.path.relpath(parse_flags(c[2:])['output_dir'], out) for c in _dry_run(
        'research/queues/long_run.sh', tmp_path, OUT=str(out), SEEDS='0 1', **env)]
  every = folders(SKIP_COMMITTED='0')
  assert {'frl/seed0', 'baselines/seed1', 'frl_tau/seed1', 'personalized/seed0'} <= set(every)
  skipped = folders(COMMITTED_RUNS=f'{roots[0]} {roots[1]}')
  assert skipped == [f for f in every if f not in ('frl/seed0', 'baselines/seed1')]
  assert folders(COMMITTED_RUNS=str(roots[1])) == [f for f in every if f != 'baselines/seed1']


def test_long_run_one_shot_cells_copy_a_finished_pre_training_only(tmp_path):
  out = tmp_path / 'out'
  for base in ('baselines/seed0', 'noniid/baselines/seed0', 'baselines/seed1'):
    (out / base).mkdir(parents=True)
    (out / base / 'DONE').write_text('')
    (out / base / 'config.toml').write_text('episodes = 1000\n')
    if base != 'baselines/seed1':   # seed 1: a committed cell, no pre-training kept
      (out / base / 'pretrain').mkdir()
      (out / base / 'pretrain' / 'metrics.csv').write_text(base)
  proc = subprocess.run(['bash', os.path.join(ROOT, 'research/queues/long_run.sh')],
                        capture_output=True, text=True, timeout=60, cwd=tmp_path,
                        env={**os.environ, 'PY': 'echo', 'NICE': '0', 'OUT': str(out),
                             'SEEDS': '0 1', 'SKIP_COMMITTED': '0'}, check=True)
  assert 'cp:' not in proc.stderr, proc.stderr
  for setting in ('', 'noniid/'):
    copied = out / setting / 'oneshot/seed0/pretrain/metrics.csv'
    assert copied.read_text() == f'{setting}baselines/seed0'
  assert not (out / 'oneshot/seed1/pretrain').exists()
  assert not (out / 'noniid/oneshot/seed1').exists()   # its baselines cell has not run


def test_long_run_queues_sharing_an_out_folder_skip_each_others_running_cells(tmp_path):
  out = tmp_path / 'out'
  live = subprocess.Popen(['sleep', '60'])
  dead = subprocess.Popen(['true'])
  dead.wait()
  try:
    for cell, pid in (('noniid/baselines/seed0', live.pid), ('noniid/frl/seed0', dead.pid)):
      (out / f'{cell}.lock').mkdir(parents=True)
      (out / f'{cell}.lock' / 'pid').write_text(f'{pid}\n')
    proc = subprocess.run(['bash', os.path.join(ROOT, 'research/queues/long_run.sh')],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, 'PY': 'echo', 'NICE': '0', 'OUT': str(out),
                               'SEEDS': '2 0', 'SKIP_COMMITTED': '0'}, check=True)
    ran = [os.path.relpath(parse_flags(shlex.split(line))['output_dir'], out)
           for line in proc.stdout.splitlines() if line.startswith('-m ')]
    assert 'noniid/baselines/seed0' not in ran        # a live queue runs it
    assert 'noniid/oneshot/seed0' not in ran          # ... and then copies its pre-training
    assert 'skip ' + str(out / 'noniid/baselines/seed0') + ' (running in another queue)' \
        in proc.stdout
    assert 'noniid/frl/seed0' in ran                  # a killed queue's lock is taken over
    assert 'noniid/oneshot/seed2' in ran and ran[-1] == 'frl_client_adam/seed0'   # smallest seed
    assert sorted(p.name for p in out.rglob('*.lock')) == ['seed0.lock']   # the live one only
    assert (out / 'noniid/baselines/seed0.lock/pid').read_text().strip() == str(live.pid)
  finally:
    live.kill()
    live.wait()


def _fake_runs(root, cells):
  """Run folders as programs.train leaves them: cell name -> algorithm; a name ending in '!'
  is unfinished."""
  for name, algorithm in cells.items():
    run = root / name.rstrip('!')
    (run / 'checkpoints').mkdir(parents=True)
    (run / 'config.toml').write_text(f'algorithm = "{algorithm}"\n')
    if not name.endswith('!'):
      (run / 'results.json').write_text('{}')


CELLS = {'table2_femnist_p20_fedavg_meta': 'fedavg_meta',              # seed 0: no FedAvg run
         'table2_femnist_p20_fedavg_meta_seed1': 'fedavg_meta',
         'table2_femnist_p20_fedavg_seed1': 'fedavg',
         'table2_femnist_p20_fedavg_meta_seed2!': 'fedavg_meta',       # still training
         'table2_femnist_p20_maml': 'fedmeta_maml',
         'table2_femnist_p50_maml': 'fedmeta_maml'}


def _evaluations(commands):
  """output name -> the flags of its programs.evaluate command."""
  assert all(c[1] == 'programs.evaluate' for c in commands)
  return {os.path.basename(parse_flags(c[2:])['output']): parse_flags(c[2:]) for c in commands}


def test_other_supports_rescores_fedavg_family_from_20_percent(tmp_path):
  _fake_runs(tmp_path / 'runs', CELLS)
  runs = _evaluations(_dry_run('research/queues/other_supports.sh', tmp_path,
                               RUNS=str(tmp_path / 'runs'), OUT=str(tmp_path / 'out')))
  both, own = {'finetune_epochs': '0,1'}, {}
  expected = {}
  for p in ('20', '50', '90'):
    extra = {} if p == '20' else {'support_fraction': str(int(p) / 100)}
    expected.update({f'table2_femnist_p{p}_fedavg_meta': {**both, **extra},
                     f'table2_femnist_p{p}_fedavg_meta_seed1': {**own, **extra},
                     f'table2_femnist_p{p}_fedavg_seed1': {'finetune_epochs': '0', **extra}})
  expected['table2_femnist_p20_maml'] = expected['table2_femnist_p50_maml'] = own
  assert set(runs) == set(expected)
  for name, flags in runs.items():
    knobs = {k: v for k, v in flags.items() if k in ('finetune_epochs', 'support_fraction')}
    assert knobs == expected[name], name
    trained = name if 'maml' in name else re.sub(r'_p\d+_', '_p20_', name)
    assert flags['run_dir'].endswith('/' + trained), (name, flags['run_dir'])


def test_other_writers_scores_each_finished_cell_as_its_method(tmp_path):
  _fake_runs(tmp_path / 'runs', CELLS)
  runs = _evaluations(_dry_run('research/queues/other_writers.sh', tmp_path,
                               RUNS=str(tmp_path / 'runs'), OUT=str(tmp_path / 'out')))
  assert {n: f.get('finetune_epochs') for n, f in runs.items()} == {
      'table2_femnist_p20_fedavg_meta': '0,1', 'table2_femnist_p20_fedavg_meta_seed1': None,
      'table2_femnist_p20_fedavg_seed1': '0', 'table2_femnist_p20_maml': None,
      'table2_femnist_p50_maml': None}
  assert all(f['clients_from'].startswith('leaf_femnist:') for f in runs.values())


@pytest.mark.parametrize('script', ['other_supports.sh', 'other_writers.sh'])
def test_scoring_scripts_leave_only_the_scores(tmp_path, script):
  # A stand-in for python that writes what programs.evaluate --output=<stem> writes: the
  # scores, and the table unless --markdown=false.
  fake = tmp_path / 'fake_python'
  fake.write_text('#!/usr/bin/env bash\n'
                  'md=1; for a in "$@"; do case $a in --output=*) stem=${a#--output=};;\n'
                  '  --markdown=false) md=0;; esac; done\n'
                  'echo "{}" > "$stem.json"; [ $md = 0 ] || echo table > "$stem.md"\n')
  fake.chmod(0o755)
  _fake_runs(tmp_path / 'runs', CELLS)
  subprocess.run(['bash', os.path.join(ROOT, 'research/queues', script)], check=True,
                 capture_output=True, timeout=60, cwd=tmp_path,
                 env={**os.environ, 'PY': str(fake), 'NICE': '0', 'RUNS': str(tmp_path / 'runs'),
                      'OUT': str(tmp_path / 'out' / 'scores')})
  written = [os.path.join(d, f) for d, _, files in os.walk(tmp_path / 'out') for f in files]
  assert written and all(f.endswith('.json') for f in written), written


def test_report003_selection_sweeps_known_keys_of_existing_algorithms(tmp_path):
  from tff_meta.algorithms import ALGORITHMS  # pylint: disable=g-import-not-at-top
  commands = _dry_run('research/queues/select_femnist_digits.sh', tmp_path,
                      OUT=str(tmp_path / 'out'))
  known = {*program_config.TOP_LEVEL, *program_config.HPARAMS}
  swept, outputs = [], set()
  for command in commands:
    assert command[1] == 'programs.sweep'
    flags = parse_flags(command[2:])
    assert os.path.exists(os.path.join(ROOT, flags['config'])), flags['config']
    assert flags['seeds'] == '0,1,2'   # the selection averages 3 seeds' validation clients
    ALGORITHMS.get(flags['algorithm'])
    keys = {item.split('=')[0] for item in flags['grid'].split(';')}
    assert keys <= known, keys - known
    swept.append(flags['algorithm'])
    outputs.add(flags['output_dir'])
  assert len(outputs) == 6   # one folder per method
  assert swept == ['fedavg', 'fedavg_meta', 'fedper', 'lg_fedavg', 'fedmeta_maml',
                   'fedmeta_metasgd']


@pytest.mark.parametrize('script', ['research/queues/table2_queue.sh',
                                    'research/queues/other_supports.sh',
                                    'research/queues/other_writers.sh',
                                    'research/queues/long_run.sh',
                                    'research/queues/select_femnist_digits.sh',
                                    'research/queues/table2_femnist.sh',
                                    'research/queues/fedec_femnist.sh',
                                    'research/queues/shakespeare.sh'])
def test_scripts_are_executable(script):
  assert os.access(os.path.join(ROOT, script), os.X_OK)


def test_variants_of_a_cell_are_scored_into_folders_of_their_own(tmp_path):
  # table2_queue.sh's variants (step 5b, 7, 8) must not land beside the cell's seeds, where
  # programs.report --scores would take them for a second score of seed 0
  _fake_runs(tmp_path / 'runs', {'table2_femnist_p20_maml': 'fedmeta_maml',
                                 'table2_femnist_p20_maml_uniform': 'fedmeta_maml',
                                 'table2_femnist_p90_metasgd': 'fedmeta_metasgd',
                                 'table2_femnist_p90_metasgd_resampled': 'fedmeta_metasgd'})
  def outputs(script):
    commands = _dry_run(script, tmp_path, RUNS=str(tmp_path / 'runs'), OUT=str(tmp_path / 'out'),
                        SUPPORTS='20 90')
    return {os.path.relpath(parse_flags(c[2:])['output'], tmp_path) for c in commands}
  assert outputs('research/queues/other_supports.sh') == {
      'out/p20/table2_femnist_p20_maml', 'out/p20_uniform/table2_femnist_p20_maml_uniform',
      'out/p90/table2_femnist_p90_metasgd',
      'out/p90_resampled/table2_femnist_p90_metasgd_resampled'}
  assert outputs('research/queues/other_writers.sh') == {
      'out/table2_femnist_p20_maml', 'out_p20_uniform/table2_femnist_p20_maml_uniform',
      'out_p90/table2_femnist_p90_metasgd',
      'out_p90_resampled/table2_femnist_p90_metasgd_resampled'}


@pytest.mark.slow   # over the 2 s of a fast test (seconds of shell work)
def test_long_run_pauses_unfinished_cells_and_resumes_them_on_another_machine(tmp_path):
  out, dest = tmp_path / 'out', tmp_path / 'paused'
  files = {'noniid/frl/seed1/config.toml': 'episodes = 1000\n',
           'noniid/frl/seed1/provenance.csv': 'time\n',
           'noniid/frl/seed1/tff_worker_123.log': '',
           'noniid/frl/seed1/frl_distance_gpal/metrics.csv': 'episode\n1\n',
           'noniid/frl/seed1/frl_distance_gpal/tensorboard/events': 'x',
           'noniid/baselines/seed1/config.toml': 'episodes = 1000\n',
           'noniid/baselines/seed1/pretrain/metrics.csv': 'round\n1\n',
           'frl/seed0/config.toml': 'episodes = 1000\n',          # finished: not paused
           'frl/seed0/DONE': ''}
  for state, stage in ((50, 'noniid/frl/seed1/frl_distance_gpal'), (100, 'noniid/frl/seed1/'
                       'frl_distance_gpal'), (250, 'noniid/baselines/seed1/pretrain'),
                       (1000, 'noniid/baselines/seed1/pretrain')):
    files[f'{stage}/checkpoints/program_state_{state}/saved_model.pb'] = str(state)
  files['noniid/baselines/seed1/pretrain/checkpoints/program_state_1050_temp1/x'] = ''
  for name, text in files.items():
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(text)
  (out / 'noniid/frl/seed1.lock').mkdir()
  script = os.path.join(ROOT, 'research/queues/long_run.sh')
  env = {**os.environ, 'PY': 'echo', 'NICE': '0', 'SEEDS': '1', 'SKIP_COMMITTED': '0'}
  proc = subprocess.run(['bash', script, 'pause', str(dest)], capture_output=True, text=True,
                        timeout=60, cwd=tmp_path, env={**env, 'OUT': str(out)}, check=True)
  assert proc.stdout.count('paused ') == 2, proc.stdout
  kept = sorted(str(p.relative_to(dest)) for p in dest.rglob('*') if p.is_file())
  assert kept == sorted([
      'noniid/baselines/seed1/config.toml', 'noniid/baselines/seed1/pretrain/metrics.csv',
      'noniid/baselines/seed1/pretrain/checkpoints/program_state_1000/saved_model.pb',
      'noniid/frl/seed1/config.toml', 'noniid/frl/seed1/provenance.csv',
      'noniid/frl/seed1/frl_distance_gpal/metrics.csv',
      'noniid/frl/seed1/frl_distance_gpal/checkpoints/program_state_100/saved_model.pb'])
  assert subprocess.run(['bash', script, 'pause'], capture_output=True, text=True, cwd=tmp_path,
                        env={**env, 'OUT': str(out)}).returncode == 2   # no destination

  new = tmp_path / 'new_machine'   # an empty OUT, the paused copies committed
  (new / 'noniid/frl_tau_pr/seed1').mkdir(parents=True)   # a cell OUT has begun: left alone
  (new / 'noniid/frl_tau_pr/seed1/config.toml').write_text('episodes = 1000\n')
  (dest / 'noniid/frl_tau_pr/seed1').mkdir(parents=True)
  (dest / 'noniid/frl_tau_pr/seed1/config.toml').write_text('episodes = 1000\nstale\n')
  (dest / 'noniid/personalized/seed1').mkdir(parents=True)   # a finished copy: not resumed
  (dest / 'noniid/personalized/seed1/config.toml').write_text('episodes = 1000\n')
  (dest / 'noniid/personalized/seed1/results.json').write_text('{}')
  proc = subprocess.run(['bash', script], capture_output=True, text=True, timeout=60,
                        cwd=tmp_path, env={**env, 'OUT': str(new), 'PAUSED_RUNS': str(dest)},
                        check=True)
  resumed = [line for line in proc.stdout.splitlines() if line.startswith('resume ')]
  assert resumed == [f'resume {new}/noniid/{cell}/seed1 from its copy in {dest}'
                     for cell in ('baselines', 'frl')]
  assert (new / 'noniid/frl/seed1/frl_distance_gpal/checkpoints/program_state_100/'
          'saved_model.pb').read_text() == '100'
  assert 'stale' not in (new / 'noniid/frl_tau_pr/seed1/config.toml').read_text()
  ran = [parse_flags(shlex.split(line))['output_dir'] for line in proc.stdout.splitlines()
         if line.startswith('-m ')]
  assert f'{new}/noniid/frl/seed1' in ran   # and the queue runs it, resuming from there
  proc = subprocess.run(['bash', script], capture_output=True, text=True, timeout=60,
                        cwd=tmp_path, env={**env, 'OUT': str(tmp_path / 'other'), 'EPISODES':
                                           '2000', 'PAUSED_RUNS': str(dest)}, check=True)
  assert 'resume ' not in proc.stdout   # a copy at another length is another experiment


def test_fedec_queue_runs_every_method_of_the_config_at_three_seeds(tmp_path):
  """research/queues/fedec_femnist.sh: one programs.train per (seed, algorithm) of the FedEC
  config, into <OUT>/fedec_<config>/seed<s>/<algorithm>, the layout docs/RESULTS.md §4 reads."""
  out = tmp_path / 'out'
  done = run_queue('research/queues/fedec_femnist.sh', tmp_path, DATA=str(tmp_path / 'data'))
  assert done.returncode == 0, done.stderr
  root = out / 'fedec_femnist_150_3'
  commands = [shlex.split(log.read_text()) for log in sorted(root.glob('seed*/*.log'))]
  cfg = config_file.load_toml(os.path.join(ROOT, 'configs/fedec/femnist_150_3.toml'))
  algorithms = set(cfg['algorithms'])
  assert len(commands) == 3 * len(algorithms)
  known = {*program_config.TOP_LEVEL, *program_config.HPARAMS, 'cache_dir', 'progress', 'config'}
  cells = set()
  for command in commands:
    assert command[:2] == ['-m', 'programs.train'], command
    flags = parse_flags(command[2:])
    assert set(flags) <= known, set(flags) - known
    assert flags['config'] == 'configs/fedec/femnist_150_3.toml'
    assert flags['output_dir'] == str(root / f"seed{flags['seed']}" / flags['algorithm'])
    cells.add((flags['seed'], flags['algorithm']))
  assert cells == {(s, a) for s in '012' for a in algorithms}
  status = subprocess.run(['bash', os.path.join(ROOT, 'research/queues/fedec_femnist.sh'),
                           'status'], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, 'OUT': str(out)}, check=False)
  assert status.returncode == 0 and 'seed0/fedec: ' in status.stdout, status


def test_table2_queue_trains_each_cell_once_and_scores_fedavg_both_ways_in_every_column(tmp_path):
  """research/queues/table2_femnist.sh with a stand-in Python that records its commands: one
  programs.train per (support, seed, method) of METHODS, FedAvg at 20% only, scored with
  --finetune_epochs=0,1 at 20, 50 and 90% and every other cell at its own fraction; a second
  start finds every cell DONE and runs nothing."""
  out, calls = tmp_path / 'out', tmp_path / 'calls'
  script = 'research/queues/table2_femnist.sh'
  done = run_queue(script, tmp_path, METHODS='fedavg maml', SEEDS='0 1')
  assert done.returncode == 0, done.stderr
  lines = recorded_calls(tmp_path)
  trains = [parse_flags(c[2:]) for c in lines if c[:2] == ['-m', 'programs.train']]
  cells = {(f['config'].split('table2_femnist_')[1], f['seed']) for f in trains}
  assert len(trains) == len(cells) == 2 + 2 * 3   # FedAvg once a seed; MAML at 20, 50, 90
  assert cells == {('p20_fedavg.toml', s) for s in '01'} | {
      (f'p{p}_maml.toml', s) for p in (20, 50, 90) for s in '01'}
  for f in trains:
    assert f['output_dir'] == str(out / f"table2_femnist_{f['config'].split('table2_femnist_')[1][:-5]}_seed{f['seed']}")
  scores = [parse_flags(c[2:]) for c in lines if c[:2] == ['-m', 'programs.evaluate']]
  fedavg = [(f['support_fraction'], f['finetune_epochs']) for f in scores if 'fedavg' in f['run_dir']]
  assert sorted(fedavg) == sorted([(p, '0,1') for p in ('0.2', '0.5', '0.9')] * 2)
  maml = {(f['run_dir'].split('_p')[1][:2], f['support_fraction']) for f in scores if 'maml' in f['run_dir']}
  assert maml == {('20', '0.2'), ('50', '0.5'), ('90', '0.9')}
  assert all((out / f"table2_femnist_{c.split('.')[0]}_seed{s}" / 'DONE').exists() for c, s in cells)
  before = calls.read_text()
  again = run_queue(script, tmp_path, METHODS='fedavg maml', SEEDS='0 1')
  assert again.returncode == 0 and calls.read_text() == before
  status = run_queue(script, tmp_path, 'status', METHODS='fedavg maml', SEEDS='0 1')
  assert 'table2_femnist_p90_maml_seed1: round 0, done' in status.stdout, status.stdout
