"""The recommendation report across seeds (tff_meta.analysis.recommend_report,
programs/report.py), on run folders laid out as programs.train
writes them (config.toml from the real config, results.json rows), checked
against hand computation."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from tests.conftest import REPO
from tff_meta.core import config_file, run_folder
from tff_meta.analysis import recommend_report
from tff_meta.recommendation.config import RecommendConfig

# RMSE per (method, seed); P@1 only where given
RMSE = {('Bias baseline', 0): 0.96, ('Bias baseline', 1): 0.95, ('Bias baseline', 2): 0.99,
        ('NN(pre-trained)', 0): 0.917, ('NN(pre-trained)', 1): 0.898, ('NN(pre-trained)', 2): 0.939,
        ('MAML', 0): 0.918, ('MAML', 1): 0.896, ('MAML', 2): 0.936}


def _write(folder, methods, seed, rmse=None, fingerprint=None, **changes):
  changes.setdefault('data_path', '/data/ml-100k')
  cfg = dataclasses.replace(RecommendConfig(), task='movielens', methods=','.join(methods),
                            seed=seed, output_dir=str(folder), **changes)
  rows = [{'method': m, 'rmse': (rmse or RMSE)[(m, seed)], 'precision@1': 0.4 + 0.01 * seed}
          for m in methods]
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, run_folder.CONFIG_FILE), 'w') as f:
    f.write(config_file.to_toml(cfg))
  with open(os.path.join(folder, run_folder.RESULTS_FILE), 'w') as f:
    json.dump({'data': 'test data', 'rows': rows, 'curves': {},
               **({'data_fingerprint': fingerprint} if fingerprint else {})}, f)


@pytest.fixture
def runs(tmp_path):
  for seed in (0, 1, 2):
    # a seed's methods in two folders, the bias baseline in both (as docs/runs/movielens_real)
    _write(tmp_path / f'p80_s{seed}', ('Bias baseline', 'NN(pre-trained)', 'MAML'), seed)
    _write(tmp_path / f'p80_s{seed}_others', ('Bias baseline',), seed)
  return tmp_path


def _rows(root, **kw):
  entries, notes = recommend_report.group(recommend_report.find_runs([str(root)]), defaults={})
  return {r['method']: r for r in recommend_report.entry_rows(entries, **kw)}, notes


def test_per_seed_values_means_and_paired_difference_match_hand_computation(runs):
  rows, notes = _rows(runs)
  maml = rows['MAML']
  assert maml['per_seed'] == {0: 0.918, 1: 0.896, 2: 0.936}
  np.testing.assert_allclose(maml['rmse'], np.mean([0.918, 0.896, 0.936]))
  np.testing.assert_allclose(maml['rmse_std'], np.std([0.918, 0.896, 0.936], ddof=1))
  d = np.array([0.918 - 0.917, 0.896 - 0.898, 0.936 - 0.939])
  np.testing.assert_allclose(maml['vs_reference'], d.mean())
  np.testing.assert_allclose(maml['vs_reference_ci95'],
                             stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3))
  assert maml['vs_reference_lower'] == 2 and maml['vs_reference_seeds'] == 3
  assert maml['lowest_on'] == 2            # seeds 1 and 2; NN(pre-trained) on seed 0
  assert rows['NN(pre-trained)']['lowest_on'] == 1 and 'vs_reference' not in rows['NN(pre-trained)']
  np.testing.assert_allclose(rows['Bias baseline']['precision@1'], 0.41)
  # the bias baseline of each seed is in two folders with the same RMSE: noted, counted once
  assert rows['Bias baseline']['seeds'] == 3
  assert len(notes) == 3 and all('rmse the same' in n for n in notes)


def test_the_paper_order_of_methods_and_another_reference(runs):
  entries, _ = recommend_report.group(recommend_report.find_runs([str(runs)]), defaults={})
  assert [e.method for e in entries] == ['Bias baseline', 'NN(pre-trained)', 'MAML']
  rows, _ = _rows(runs, reference='Bias baseline')
  np.testing.assert_allclose(rows['MAML']['vs_reference'],
                             np.mean([0.918 - 0.96, 0.896 - 0.95, 0.936 - 0.99]))
  assert rows['MAML']['vs_reference_lower'] == 3


def test_a_rerun_that_disagrees_is_noted_and_the_first_folder_is_used(runs):
  other = dict(RMSE)
  other[('MAML', 0)] = 0.95
  _write(runs / 'z_rerun_s0', ('MAML',), 0, rmse=other)
  rows, notes = _rows(runs)
  assert rows['MAML']['per_seed'][0] == 0.918
  assert any('MAML' in n and 'z_rerun_s0' in n and '0.918 against 0.95' in n for n in notes)


def test_other_settings_and_variants_are_kept_apart(runs):
  _write(runs / 'p50_s0', ('MAML',), 0, support_fraction=0.5)
  _write(runs / 'lr_s0', ('MAML',), 0, inner_lr=0.05)
  entries, _ = recommend_report.group(recommend_report.find_runs([str(runs)]), defaults={})
  settings = {e.setting for e in entries}
  assert any('50% support' in s for s in settings) and any('80% support' in s for s in settings)
  names = [e.method for e in entries if '80% support' in e.setting]
  assert 'MAML [inner_lr=0.05]' in names and 'MAML [inner_lr=0.01]' in names


def test_a_key_only_the_meta_learners_read_splits_only_their_rows(tmp_path):
  """train_split (META_ONLY_KEYS) changes MAML's rows, not NN(pre-trained)'s: MAML's two
  variants each pair with NN(pre-trained) seed by seed, whose rows of both runs merge (and a
  key every method reads still splits every row)."""
  new = dict(RMSE)
  new.update({('MAML', 0): 0.910, ('MAML', 1): 0.890, ('MAML', 2): 0.930})
  for seed in (0, 1, 2):
    _write(tmp_path / f'fixed_s{seed}', ('NN(pre-trained)', 'MAML'), seed)
    _write(tmp_path / f'per_s{seed}', ('MAML',) if seed else ('NN(pre-trained)', 'MAML'), seed,
           rmse=new, train_split='per_episode')
  _write(tmp_path / 'lr_s0', ('NN(pre-trained)',), 0, inner_lr=0.05)
  rows, notes = _rows(tmp_path)
  assert set(rows) == {'NN(pre-trained) [inner_lr=0.01]', 'NN(pre-trained) [inner_lr=0.05]',
                       "MAML [inner_lr=0.01, train_split='fixed']",
                       "MAML [inner_lr=0.01, train_split='per_episode']"}
  assert rows['NN(pre-trained) [inner_lr=0.01]']['per_seed'] == {0: 0.917, 1: 0.898, 2: 0.939}
  assert any('seed 0' in n and 'per_s0' in n and 'rmse the same' in n for n in notes)
  rows, _ = _rows(tmp_path, reference='NN(pre-trained) [inner_lr=0.01]')
  diffs = np.array([-0.007, -0.008, -0.009])
  row = rows["MAML [inner_lr=0.01, train_split='per_episode']"]
  assert row['vs_reference'] == pytest.approx(diffs.mean())
  assert row['vs_reference_ci95'] == pytest.approx(
      stats.t.ppf(0.975, 2) * diffs.std(ddof=1) / np.sqrt(3))
  assert (row['vs_reference_seeds'], row['vs_reference_lower']) == (3, 3)


def test_seeds_pool_over_the_same_data_not_the_same_path(tmp_path):
  methods = ('NN(pre-trained)', 'MAML')
  _write(tmp_path / 'a_s0', methods, 0, fingerprint='0123456789abcdef', data_path='/a/gen')
  _write(tmp_path / 'b_s1', methods, 1, fingerprint='0123456789abcdef', data_path='/b/gen')
  # another data set written later to /a/gen, and a run from before fingerprints at /a/gen
  _write(tmp_path / 'c_s2', methods, 2, fingerprint='fedcba9876543210', data_path='/a/gen')
  _write(tmp_path / 'd_s2', methods, 2, data_path='/a/gen')
  entries, notes = recommend_report.group(recommend_report.find_runs([str(tmp_path)]),
                                          defaults={})
  seeds = {e.setting: e.seeds for e in entries if e.method == 'MAML'}
  assert seeds == {'movielens at /a/gen = /b/gen (data 01234567), 80% support, random split': [0, 1],
                   'movielens at /a/gen (data fedcba98), 80% support, random split': [2],
                   'movielens at /a/gen, 80% support, random split': [2]}
  assert not notes


def test_older_config_files_are_filled_with_the_defaults(tmp_path):
  """A key missing from an older config.toml meant its default: no spurious variant."""
  _write(tmp_path / 's0', ('MAML',), 0)
  _write(tmp_path / 's1', ('MAML',), 1)
  path = tmp_path / 's1' / run_folder.CONFIG_FILE
  text = path.read_text().splitlines()
  path.write_text('\n'.join(l for l in text if not l.startswith('inner_steps')) + '\n')
  entries, _ = recommend_report.group(recommend_report.find_runs([str(tmp_path)]))
  assert [(e.method, e.seeds) for e in entries] == [('MAML', [0, 1])]


def test_build_writes_report_and_csv_and_skips_other_folders(runs, tmp_path):
  os.makedirs(runs / 'not_a_run')    # another program's run folder
  (runs / 'not_a_run' / run_folder.RESULTS_FILE).write_text('{"results": []}')
  (runs / 'not_a_run' / run_folder.CONFIG_FILE).write_text('seed = 0\n')
  out = tmp_path / 'out'
  result = recommend_report.build([str(runs)], str(out), defaults={})
  assert result['runs'] == 6
  md = (out / 'report.md').read_text()
  assert '| MAML | 0.9180 | 0.8960 | 0.9360 |' in md and '(lower on 2 of 3)' in md
  csv = (out / 'report.csv').read_text().splitlines()
  assert 'rmse_seed0' in csv[0] and len(csv) == 4


def test_one_seed_shows_its_values_without_a_spread(tmp_path):
  """A metric over one seed has no std to show: '0.9180', not '0.9180 ± 0.0000'."""
  _write(tmp_path / 's0', ('NN(pre-trained)', 'MAML'), 0)
  _write(tmp_path / 's1', ('MAML',), 1)
  entries, _ = recommend_report.group(recommend_report.find_runs([str(tmp_path)]), defaults={})
  md = recommend_report.markdown(recommend_report.entry_rows(entries))
  assert '| NN(pre-trained) | 0.9170 |  | 0.9170 |' in md and '0.9170 ±' not in md
  assert '| NN(pre-trained) | 1 | 0.9170 | 40.00 |' in md
  assert f'| 2 | {np.mean([0.918, 0.896]):.4f} ± {np.std([0.918, 0.896], ddof=1):.4f} | 40.50 ± 0.71 |' in md


@pytest.mark.slow
def test_program_reports_and_refuses_a_folder_without_runs(runs, tmp_path):
  cmd = [sys.executable, '-m', 'programs.report', f'--runs={runs}',
         f'--output_dir={tmp_path / "out"}']
  ok = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
  assert ok.returncode == 0, ok.stderr
  assert 'RMSE − NN(pre-trained)' in ok.stdout and 'Read 6 run folder(s)' in ok.stdout
  empty = tmp_path / 'empty'
  empty.mkdir()
  bad = subprocess.run(cmd[:3] + [f'--runs={empty}', f'--output_dir={tmp_path / "o2"}'],
                       cwd=REPO, capture_output=True, text=True, check=False)
  assert bad.returncode != 0 and 'Traceback' not in bad.stderr
  assert bad.stderr.strip().splitlines()[-1].startswith('error: no run folders')
