"""research/queues/shakespeare.sh, run with a stand-in Python that records its commands."""

import os

from tests.conftest import REPO as ROOT
from tests.research.queue_fakes import parse_flags
from tests.research.queue_fakes import recorded_calls
from tests.research.queue_fakes import run_queue
from tff_meta.classification import config as program_config
from tff_meta.core import config_file

SCRIPT = 'research/queues/shakespeare.sh'


def _run(tmp_path, *args, **env):
  return run_queue(SCRIPT, tmp_path, *args, **env)


def test_each_cell_is_trained_once_and_fedavg_is_scored_both_ways(tmp_path):
  done = _run(tmp_path)
  assert done.returncode == 0, done.stderr
  calls = recorded_calls(tmp_path)
  trains = [parse_flags(c[2:]) for c in calls if c[:2] == ['-m', 'programs.train']]
  assert sorted(os.path.basename(f['config']) for f in trains) == [
      f'table2_shakespeare_p20_{m}_capped.toml' for m in ('fedavg', 'maml', 'metasgd')]
  known = {*program_config.TOP_LEVEL, *program_config.HPARAMS, 'cache_dir', 'progress', 'config'}
  for f in trains:
    assert set(f) <= known, set(f) - known
    assert os.path.exists(os.path.join(ROOT, f['config'])), f['config']
    assert f['seed'] == '0' and f['cache_dir'] == str(tmp_path)
    method = os.path.basename(f['config']).split('_')[3]
    assert f['output_dir'] == str(tmp_path / 'out' / f'table2_shakespeare_p20_{method}_capped_seed0')
    assert (tmp_path / 'out' / f'table2_shakespeare_p20_{method}_capped_seed0' / 'DONE').exists()
  scores = {os.path.basename(f['run_dir']): f['finetune_epochs']
            for f in (parse_flags(c[2:]) for c in calls if c[:2] == ['-m', 'programs.evaluate'])}
  assert scores == {'table2_shakespeare_p20_fedavg_capped_seed0': '0,1',
                    'table2_shakespeare_p20_maml_capped_seed0': '1',
                    'table2_shakespeare_p20_metasgd_capped_seed0': '1'}
  before = (tmp_path / 'calls').read_text()
  assert _run(tmp_path).returncode == 0 and (tmp_path / 'calls').read_text() == before
  status = _run(tmp_path, 'status')
  assert 'table2_shakespeare_p20_maml_capped_seed0: round 0, done' in status.stdout, status.stdout


def test_a_failed_training_is_logged_and_resumed_on_the_next_start(tmp_path):
  failed = _run(tmp_path, METHODS='maml', SLOTS='1', FAIL='1')
  assert failed.returncode == 0 and 'trained table2_shakespeare_p20_maml_capped_seed0 (exit 1' in failed.stdout
  folder = tmp_path / 'out' / 'table2_shakespeare_p20_maml_capped_seed0'
  assert not (folder / 'TRAINED').exists() and not (folder / 'DONE').exists()
  assert 'round 0, training' in _run(tmp_path, 'status', METHODS='maml').stdout
  assert _run(tmp_path, METHODS='maml', SLOTS='1').returncode == 0
  trains = [c for c in recorded_calls(tmp_path) if c[:2] == ['-m', 'programs.train']]
  assert len(trains) == 2 and (folder / 'DONE').exists()   # started again, then scored


def test_the_capped_configs_differ_from_the_paper_cells_only_in_the_cap_and_rounds():
  for method in ('fedavg', 'fedavg_meta', 'maml', 'metasgd'):
    paper = config_file.load_toml(os.path.join(ROOT, f'configs/fedmeta/table2_shakespeare_p20_{method}.toml'))
    capped = config_file.load_toml(os.path.join(ROOT, f'configs/fedmeta/table2_shakespeare_p20_{method}_capped.toml'))
    changed = {k for k in set(paper) | set(capped) if paper.get(k) != capped.get(k)}
    assert changed == {'name', 'output_dir', 'max_client_examples', 'rounds', 'eval_every'}, changed
    assert capped['max_client_examples'] > 0 and capped['resample_support'] is True
    assert capped['clients_per_round'] == 50 and capped['rounds'] < paper['rounds']
    assert capped['hparams'] == paper['hparams'] and capped['data'] == paper['data']


def test_without_data_the_queue_stops_with_one_error_line(tmp_path):
  out = _run(tmp_path, DATA='')
  assert out.returncode == 2 and out.stderr.startswith('error: set DATA'), out.stderr
