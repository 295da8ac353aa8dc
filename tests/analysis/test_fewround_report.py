"""The few-round report across seeds (tff_meta.analysis.fewround_report,
programs/report.py), on run folders written by few-round's own writer
(`fewround.experiment.write`), checked against hand computation."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from tff_meta.core import run_folder
from tff_meta.analysis import fewround_figures, fewround_report
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import experiment

# per (method, seed): accuracy of each of 4 test episodes after R = 1 and R = 3
EPISODES = {
    ('frl_distance_gpal', 0): {1: [0.6, 0.7, 0.8, 0.7], 3: [0.8, 0.9, 0.8, 0.9]},
    ('frl_distance_gpal', 1): {1: [0.5, 0.6, 0.7, 0.6], 3: [0.7, 0.8, 0.9, 0.8]},
    ('finetune_fedavg', 0): {1: [0.6, 0.6, 0.6, 0.6], 3: [0.7, 0.7, 0.7, 0.8]},
    ('finetune_fedavg', 1): {1: [0.5, 0.5, 0.6, 0.6], 3: [0.8, 0.8, 0.8, 0.8]},
}


def _row(method, seed):
  acc = {str(r): {'mean': float(np.mean(v)), 'ci95': 0.01, 'episodes': len(v), 'text': '',
                  'per_episode': v} for r, v in EPISODES[(method, seed)].items()}
  return {'method': method, 'seconds': 1.0, 'info': {}, 'accuracy': acc}


def _write(folder, methods, seed, **changes):
  cfg = dataclasses.replace(config_lib.FewRoundConfig(), test_rounds=(1, 3), methods=methods,
                            seed=seed, output_dir=str(folder), **changes)
  os.makedirs(folder, exist_ok=True)
  experiment.write(cfg, str(folder), [_row(m, seed) for m in methods])


@pytest.fixture
def runs(tmp_path):
  for seed in (0, 1):
    _write(tmp_path / 'frl' / f'seed{seed}', ('frl_distance_gpal',), seed)
    _write(tmp_path / 'baselines' / f'seed{seed}', ('finetune_fedavg',), seed)
  return tmp_path


def _rows(runs, **kw):
  entries, notes = fewround_report.group(fewround_report.find_runs([str(runs)]))
  return {(r['method'], r['R']): r for r in fewround_report.entry_rows(entries, **kw)}, notes


def test_seed_means_std_and_gain_match_hand_computation(runs):
  rows, notes = _rows(runs)
  assert not notes
  frl3 = rows[('frl_distance_gpal', 3)]
  per_seed = [85.0, 80.0]   # means of the R = 3 episodes of seeds 0 and 1
  assert frl3['seeds'] == 2 and frl3['seed_list'] == '0 1'
  assert frl3['accuracy'] == pytest.approx(82.5)
  assert frl3['std_over_seeds'] == pytest.approx(np.std(per_seed, ddof=1))   # ddof=0 gives 2.5
  assert frl3['mean_ci95'] == pytest.approx(1.0)
  # gain R1 -> R3 per seed: 85 - 70 and 80 - 60; mean 17.5
  assert frl3['gain'] == pytest.approx(17.5)
  assert np.isnan(rows[('frl_distance_gpal', 1)]['gain'])


def test_paired_difference_to_the_reference_is_taken_episode_by_episode(runs):
  rows, _ = _rows(runs)
  frl3 = rows[('frl_distance_gpal', 3)]
  d0 = 100 * (np.array([0.8, 0.9, 0.8, 0.9]) - np.array([0.7, 0.7, 0.7, 0.8]))   # 10 20 10 10
  d1 = 100 * (np.array([0.7, 0.8, 0.9, 0.8]) - np.array([0.8, 0.8, 0.8, 0.8]))   # -10 0 10 0
  h0 = 1.959963984540054 * np.std(d0, ddof=1) / 2
  h1 = 1.959963984540054 * np.std(d1, ddof=1) / 2
  assert frl3['vs_reference'] == pytest.approx((d0.mean() + d1.mean()) / 2)   # (12.5 + 0) / 2
  assert frl3['vs_reference_seeds'] == 2
  assert frl3['vs_reference_above'] == int(d0.mean() - h0 > 0) + int(d1.mean() - h1 > 0) == 1
  assert frl3['vs_reference_below'] == 0
  assert frl3['vs_reference_per_seed'] == f'{d0.mean():+.2f}±{h0:.2f} {d1.mean():+.2f}±{h1:.2f}'
  assert 'vs_reference' not in rows[('finetune_fedavg', 3)]   # not against itself
  # another reference: the roles swap, the difference flips sign
  rows, _ = _rows(runs, reference='frl_distance_gpal')
  assert rows[('finetune_fedavg', 3)]['vs_reference'] == pytest.approx(-6.25)


def test_other_configs_are_variants_and_non_iid_another_setting(runs):
  _write(runs / 'client_adam' / 'seed0', ('frl_distance_gpal',), 0, meta_update='server_adam')
  _write(runs / 'noniid' / 'seed0', ('frl_distance_gpal',), 0, iid=False)
  entries, _ = fewround_report.group(fewround_report.find_runs([str(runs)]))
  names = sorted((e.setting.label, e.method, len(e.members)) for e in entries)
  iid = [n for n in names if 'non-IID' not in n[0]]
  assert [(m, k) for _, m, k in iid] == [
      ('finetune_fedavg', 2), ("frl_distance_gpal [meta_update='client_adam']", 2),
      ("frl_distance_gpal [meta_update='server_adam']", 1)]
  # one config, one name in every setting: the non-IID run is named as its IID variant
  assert [(m, k) for s, m, k in names if 'non-IID' in s] == [
      ("frl_distance_gpal [meta_update='client_adam']", 1)]
  # with a single variant anywhere, no label at all
  entries, _ = fewround_report.group(fewround_report.find_runs([str(runs / 'noniid')]))
  assert [e.method for e in entries] == ['frl_distance_gpal']


def test_a_method_has_one_color_in_every_panel(runs, monkeypatch):
  # non-IID holds only the FRL run, so without one color map its line would take the first
  # color, which the IID panel gives to finetune_fedavg
  _write(runs / 'noniid' / 'seed0', ('frl_distance_gpal',), 0, iid=False)
  entries, _ = fewround_report.group(fewround_report.find_runs([str(runs)]))
  figures = []
  monkeypatch.setattr(fewround_figures, '_save', lambda fig, plt, path: figures.append(fig))
  fewround_figures.plot(entries, fewround_report.entry_rows(entries), str(runs / 'out'))
  [fig] = figures
  by_panel = []
  for ax in fig.axes:
    handles, labels = ax.get_legend_handles_labels()   # errorbar containers: [0] is the line
    by_panel.append({label.split(' (')[0]: tuple(handle[0].get_color())
                     for handle, label in zip(handles, labels)})
  [iid] = [p for p in by_panel if 'finetune_fedavg' in p]
  [noniid] = [p for p in by_panel if 'finetune_fedavg' not in p]
  assert noniid['frl_distance_gpal'] == iid['frl_distance_gpal']
  assert iid['frl_distance_gpal'] != iid['finetune_fedavg']


def test_a_key_missing_from_an_older_config_counts_as_its_default(runs):
  # seed 1's FRL written before `select_every` and `select_episodes` existed: the same method,
  # not a variant
  path = runs / 'frl' / 'seed1' / run_folder.RESULTS_FILE
  saved = json.loads(path.read_text())
  saved['config'] = '\n'.join(line for line in saved['config'].splitlines()
                              if not line.startswith(('select_every', 'select_episodes')))
  path.write_text(json.dumps(saved))
  rows, _ = _rows(runs)
  assert rows[('frl_distance_gpal', 3)]['seeds'] == 2
  # a key set away from its default is still a variant
  _write(runs / 'selected' / 'seed0', ('frl_distance_gpal',), 0, select_every=50)
  entries, _ = fewround_report.group(fewround_report.find_runs([str(runs)]))
  assert sorted(e.method for e in entries) == [
      'finetune_fedavg', 'frl_distance_gpal [select_every=0]', 'frl_distance_gpal [select_every=50]']


def test_meta_training_table_gives_window_means_of_metrics_csv(runs):
  # seed 0's FRL logged 10 episodes (R = 3 rounds: support losses of rounds 0, 1, 2)
  folder = runs / 'frl' / 'seed0' / 'frl_distance_gpal'
  folder.mkdir()
  lines = ['episode,query_accuracy,support_loss_round0,support_loss_round1,support_loss_round2']
  lines += [f'{i},{i / 10},{1 + i / 100},{0.5},{i}' for i in range(1, 11)]
  (folder / run_folder.METRICS_FILE).write_text('\n'.join(lines) + '\n')
  entries, _ = fewround_report.group(fewround_report.find_runs([str(runs)]))
  md = fewround_figures.meta_training_markdown(entries, windows=5)
  table = md.split('### frl_distance_gpal, seed 0')[1]
  assert 'seed 1' not in md   # seed 1 logged nothing
  # window k holds episodes 2k-1 and 2k: means (2k - 0.5) / 10, 1 + (2k - 0.5) / 100, 0.5, 2k - 0.5
  for k in range(1, 6):
    m = 2 * k - 0.5
    assert f'| {2 * k - 1}-{2 * k} | {m / 10:.3f} | {1 + m / 100:.3f} | 0.500 | {m:.3f} |' in table
  assert fewround_figures.window_means(np.arange(7.0), 3) == [(1, 2, 0.5), (3, 5, 3.0), (6, 7, 5.5)]


def test_duplicate_seed_is_noted(runs):
  _write(runs / 'again' / 'seed0', ('frl_distance_gpal',), 0)
  _, notes = _rows(runs)
  assert len(notes) == 1 and 'seed(s) [0]' in notes[0] and 'again' in notes[0]


def test_other_programs_results_are_skipped_and_bad_json_is_an_error(runs, tmp_path):
  other = runs / 'train_run'
  other.mkdir()
  (other / run_folder.RESULTS_FILE).write_text(json.dumps({'summary': {}, 'history': []}))
  assert len(fewround_report.find_runs([str(runs)])) == 4
  (other / run_folder.RESULTS_FILE).write_text('{not json')
  with pytest.raises(run_folder.RunFolderError, match='train_run.*cannot be read as JSON'):
    fewround_report.find_runs([str(runs)])


def _program(*args):
  return subprocess.run([sys.executable, '-m', 'programs.report', *args], cwd=REPO,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))


@pytest.mark.slow
def test_program_writes_the_report_and_the_figures(runs, tmp_path):
  out = tmp_path / 'report'
  proc = _program(f'--runs={runs}', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  md = (out / 'report.md').read_text()
  assert '| frl_distance_gpal | 0 1 | 65.00 ± 7.07 (CI ±1.00) | 82.50 ± 3.54 (CI ±1.00) |' in md
  assert '+6.25 (above in 1/2, below in 0/2)' in md
  assert (out / 'report.csv').exists() and (out / 'accuracy_by_rounds.png').stat().st_size > 0
  assert not (out / 'meta_training.png').exists()   # no method logged meta-training here
  assert '## Runs' in md and '(seed 0, code not recorded)' in md   # no provenance.csv here


@pytest.mark.slow
def test_program_errors_are_one_line(tmp_path):
  empty = tmp_path / 'empty'
  empty.mkdir()
  for runs, message in ((tmp_path / 'nope', 'is not a folder'),
                        (empty, 'no run folders')):
    proc = _program(f'--runs={runs}', f'--output_dir={tmp_path / "out"}')
    assert proc.returncode != 0
    assert proc.stderr.strip().startswith('error:') and message in proc.stderr
    assert 'Traceback' not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize('rows, message', [
    ('1,0.5\n2,abc\n', 'line 3: holds a value that is not a number'),
    ('1,0.5\n2,0.4,9\n', 'line 3: has a different number of cells than the header'),
])
def test_program_names_a_damaged_metrics_file(runs, tmp_path, rows, message):
  folder = runs / 'frl' / 'seed0' / 'frl_distance_gpal'
  folder.mkdir()
  (folder / run_folder.METRICS_FILE).write_text('episode,query_accuracy\n' + rows)
  proc = _program(f'--runs={runs}', f'--output_dir={tmp_path / "out"}')
  assert proc.returncode == 1 and 'Traceback' not in proc.stderr
  assert proc.stderr.strip().startswith('error:') and len(proc.stderr.strip().splitlines()) == 1
  assert f'{folder / run_folder.METRICS_FILE}, {message}' in proc.stderr
