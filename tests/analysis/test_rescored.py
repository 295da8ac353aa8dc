"""tff_meta/analysis/rescored.py and programs.report --scores: per-method summaries of runs
scored on other clients, checked against hand computation."""

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from tests.conftest import REPO
from tests.programs.program_client import assert_clean_error
from tff_meta.analysis import rescored

IDS = ['w1', 'w2', 'w3']


def _write(folder, name, seed, rows, split='leaf_femnist: all 3', **extra):
  (folder / f'{name}.json').write_text(json.dumps(
      {'run_dir': f'/runs/{name}', 'algorithm': 'x', 'seed': seed, 'round': 2000, 'split': split,
       **extra,
       'rows': [dict(setting=s, method=m, accuracy=a, client_ids=ids, client_accuracies=c,
                     label=m if s == 'as run' or set(knobs) == {'finetune_epochs'} else
                     f'{m} ({s})', **knobs) for s, m, a, ids, c, knobs in rows]}))


@pytest.fixture
def folder(tmp_path):
  # FedAvg's run, scored both ways, on seeds 0 and 1; MAML on seed 1 (client order shuffled:
  # pairing goes by id), and once with 5 inner steps, which is a variant of its own.
  _write(tmp_path, 'fedavg_s0', 0, [
      ('finetune_epochs=0', 'FedAvg', 0.50, IDS, [0.4, 0.5, 0.6], {'finetune_epochs': 0}),
      ('finetune_epochs=1', 'FedAvg(Meta)', 0.60, IDS, [0.5, 0.6, 0.7], {'finetune_epochs': 1})])
  _write(tmp_path, 'fedavg_s1', 1, [
      ('finetune_epochs=0', 'FedAvg', 0.70, IDS, [0.6, 0.7, 0.8], {'finetune_epochs': 0})])
  _write(tmp_path, 'maml_s1', 1, [
      ('as run', 'FedMeta(MAML)', 0.80, ['w3', 'w1', 'w2'], [1.0, 0.7, 0.7], {}),
      ('eval_inner_steps=5', 'FedMeta(MAML)', 0.90, IDS, [0.9, 0.9, 0.9], {'eval_inner_steps': 5})])
  return tmp_path


def test_summary_by_hand(folder):
  scores, clients = rescored.read(str(folder))
  assert clients == 'leaf_femnist: all 3'
  rows = {r['method']: r for r in rescored.summarize(scores, 'FedAvg')}
  assert list(rows) == ['FedAvg', 'FedAvg(Meta)', 'FedMeta(MAML)',
                        'FedMeta(MAML) (eval_inner_steps=5)']
  avg = rows['FedAvg']
  assert avg['seeds'] == [0, 1] and 'vs_diff' not in avg
  assert avg['accuracy'] == pytest.approx(60.0) and avg['accuracy_std'] == pytest.approx(10.0 * 2 ** 0.5)
  assert avg['client_mean'] == pytest.approx(100 * np.mean([.4, .5, .6, .6, .7, .8]))
  # FedAvg(Meta) pairs with seed 0's FedAvg only: +10 points on every client, so a zero-width CI
  meta = rows['FedAvg(Meta)']
  assert (meta['vs_diff'], meta['vs_clients'], meta['vs_seeds']) == (pytest.approx(10.0), 3, 1)
  assert meta['vs_ci95'] == pytest.approx(0.0, abs=1e-9)
  # MAML (seed 1) - FedAvg (seed 1) by id: w1 0.7-0.6, w2 0.7-0.7, w3 1.0-0.8
  d = np.array([10.0, 0.0, 20.0])
  maml = rows['FedMeta(MAML)']
  assert maml['vs_diff'] == pytest.approx(d.mean())
  assert maml['vs_ci95'] == pytest.approx(stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3))
  text = rescored.markdown(list(rows.values()), clients, 'FedAvg')
  assert '| FedMeta(MAML) | 1 | 80.00 ± 0.00 | 80.00 | +10.00 ± 24.84 (3 clients, 1 seed(s)) |' in text


def test_bad_folders(tmp_path, folder):
  with pytest.raises(rescored.ScoresError, match='holds no'):
    rescored.read(str(tmp_path / 'fedavg_s0.json.d'))
  _write(folder, 'other', 2, [('as run', 'FedAvg', 0.5, IDS, [.5] * 3, {})], split='digits: all 3')
  with pytest.raises(rescored.ScoresError, match='mixes scores on different clients'):
    rescored.read(str(folder))
  # the same writers split at another support fraction: other query sets
  _write(folder, 'other', 2, [('as run', 'FedAvg', 0.5, IDS, [.5] * 3, {})], support_fraction=0.5)
  with pytest.raises(rescored.ScoresError, match=r'\(leaf_femnist: all 3, leaf_femnist: all 3, '
                     r'support 50%\); .* 3 file\(s\) predate the support fraction.s record'):
    rescored.read(str(folder))
  (folder / 'other.json').write_text('{"rows": []}')
  with pytest.raises(rescored.ScoresError, match='other.json is not a score file'):
    rescored.read(str(folder))
  _write(folder, 'other', 1, [('finetune_epochs=0', 'FedAvg', 0.5, IDS, [.5] * 3,
                               {'finetune_epochs': 0})])
  with pytest.raises(rescored.ScoresError, match='FedAvg has two scores of one seed'):
    rescored.summarize(rescored.read(str(folder))[0])


def _report(*args):
  return subprocess.run([sys.executable, '-m', 'programs.report', *args], cwd=REPO,
                        capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_program_prints_the_table_and_names_bad_inputs(folder, tmp_path):
  out = tmp_path / 'out' / 'rescored.md'
  proc = _report(f'--scores={folder}', f'--output_dir={out.parent}')
  assert proc.returncode == 0, proc.stderr
  assert out.read_text() in proc.stdout + '\n' and '| FedAvg(Meta) | 0 |' in proc.stdout
  assert_clean_error(_report(), 'give --runs=DIR')
  assert_clean_error(_report(f'--scores={tmp_path / "none"}'), 'holds no *.json')
  assert_clean_error(_report(f'--scores={folder}', '--reference=FedProx'),
                     '--reference=FedProx: no such method')


def test_several_folders_split_a_method_found_in_more_than_one(folder, tmp_path):
  # a variant of seed 1's MAML cell scored into its own folder: a row of its own, named by the
  # folder, paired with the reference of the first folder; methods found once keep their names
  other = tmp_path / 'maml_resampled'
  other.mkdir()
  _write(other, 'maml_s1', 1, [('as run', 'FedMeta(MAML)', 0.9, IDS, [0.9, 0.8, 1.0], {})])
  scores, clients = rescored.read(f'{folder},{other}')
  assert clients == 'leaf_femnist: all 3'
  rows = {r['method']: r for r in rescored.summarize(scores, 'FedAvg')}
  base = folder.name
  assert list(rows) == ['FedAvg', 'FedAvg(Meta)', f'FedMeta(MAML) [{base}]',
                        'FedMeta(MAML) (eval_inner_steps=5)', 'FedMeta(MAML) [maml_resampled]']
  # w1 0.9-0.6, w2 0.8-0.7, w3 1.0-0.8 against seed 1's FedAvg
  assert rows['FedMeta(MAML) [maml_resampled]']['vs_diff'] == pytest.approx(20.0)
  assert rows[f'FedMeta(MAML) [{base}]']['vs_diff'] == pytest.approx(10.0)
  # one folder: the names are the methods' own (the other tests), and an empty list is an error
  with pytest.raises(rescored.ScoresError, match='names no folder'):
    rescored.read(' , ')
  with pytest.raises(rescored.ScoresError, match='none holds no'):
    rescored.read(f'{folder},{tmp_path / "none"}')
