"""The report (tff_meta.analysis.report, programs/report.py) on a tiny compare output: tables,
plots and errors, checked against the run files."""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from tff_meta.core import provenance, run_folder
from tff_meta.analysis import report

SETTING = 'digits, mlp, p=20%'
METHODS = {'fedavg': 'FedAvg', 'fedmeta_maml': 'FedMeta(MAML)'}
SEEDS = (0, 1)
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')


def _run(*args, timeout=300):
  return subprocess.run([sys.executable, *args], cwd=REPO, env=ENV, capture_output=True,
                        text=True, timeout=timeout)


@pytest.fixture(scope='module')
def runs_dir(tmp_path_factory):
  out = tmp_path_factory.mktemp('report') / 'cmp'
  proc = _run('-m', 'programs.compare', '--config=configs/demo/digits.toml',
              '--algorithms=fedavg,fedmeta_maml', '--seeds=2', '--rounds=4', '--eval_every=2',
              '--progress=false', f'--output_dir={out}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  return out


def _report(runs, out, *flags):
  runs = ','.join(str(r) for r in (runs if isinstance(runs, (list, tuple)) else [runs]))
  return _run('-m', 'programs.report', f'--runs={runs}', f'--output_dir={out}', *flags)


def _results(runs_dir, alg, seed):
  with open(runs_dir / f'seed{seed}' / alg / 'results.json') as f:
    return json.load(f)


def _bytes_through(run_folder, round_num):
  """Bytes down + up of rounds 1..round_num, read straight from metrics.csv."""
  with open(run_folder / 'metrics.csv', newline='') as f:
    return sum(int(r['bytes_down']) + int(r['bytes_up']) for r in csv.DictReader(f)
               if int(r['round']) <= round_num)


def _flops_through(run_folder, round_num):
  """client_flops of rounds 1..round_num; None when metrics.csv has no such column."""
  with open(run_folder / 'metrics.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  if 'client_flops' not in rows[0]:
    return None
  return sum(float(r['client_flops']) for r in rows if int(r['round']) <= round_num)


def _first_reaching(res, target):
  return next((int(h['round']) for h in res['history'] if h['test_accuracy'] >= target), None)


def _table(markdown, heading):
  """{first cell: row cells} of the first Markdown table after `## heading`."""
  lines = markdown.split(f'## {heading}\n', 1)[1].splitlines()
  start = next(i for i, l in enumerate(lines) if l.startswith('|'))
  rows = []
  for line in lines[start:]:
    if not line.startswith('|'):
      break
    rows.append([c.strip() for c in line.strip('|').split('|')])
  header, body = rows[0], rows[2:]
  return header, {r[0]: dict(zip(header, r)) for r in body}


def _is_png(path, min_size=(400, 300)):
  import matplotlib.image as mpimg  # pylint: disable=g-import-not-at-top
  with open(path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n', path
  img = mpimg.imread(path)
  assert img.shape[1] >= min_size[0] and img.shape[0] >= min_size[1], (path, img.shape)
  assert img[..., :3].std() > 0.01, f'{path} is blank'   # something is drawn


def _fmt(x):
  return f'{x:,.0f}' if abs(x) >= 1000 else f'{x:.4g}'


@pytest.mark.slow
def test_report_tables_and_plots_match_the_run_files(runs_dir, tmp_path):
  res = {(a, s): _results(runs_dir, a, s) for a in METHODS for s in SEEDS}
  # A target that every FedAvg run reaches at some evaluation, so cost.png must exist.
  target = min(max(h['test_accuracy'] for h in res['fedavg', s]['history']) for s in SEEDS)
  target = float(f'{target:.6f}') - 1e-6
  out = tmp_path / 'rep'
  proc = _report(runs_dir, out, f'--target_accuracy={target}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  for name in ('report.md', 'fairness.md', 'report.csv', 'convergence_rounds.png',
               'convergence_bytes.png', 'fairness.png', 'cost.png'):
    assert (out / name).exists(), name
  for name in ('convergence_rounds.png', 'convergence_bytes.png', 'fairness.png', 'cost.png'):
    _is_png(out / name)

  md = (out / 'report.md').read_text()
  assert '| FedAvg |' in proc.stdout   # the tables are printed too
  # Evaluations at rounds 0, 2 and 4 leave the third quarter (2, 3] empty: no late-gain table
  # (groups.late_gain; its numbers are checked in test_groups.py).
  assert 'Still rising' not in md
  assert f'(seed 0, code {provenance.code_version()})' in md   # the runs' provenance.csv
  _, pivot = _table(md, 'Accuracy % (methods × settings; runs in parentheses)')
  header, rows = _table(md, SETTING)
  assert list(rows) == list(METHODS.values())
  t = f'{100 * target:g}%'
  assert header[-4:] == [f'Rounds to {t}', f'MB to {t}', f'GFLOPs to {t}',
                         f"FedAvg's MB / GFLOPs to {t} ÷ this"]
  mb_mean, gf_mean = {}, {}
  for alg, name in METHODS.items():
    accs = [res[alg, s]['summary']['accuracy'] for s in SEEDS]
    pooled = np.concatenate([res[alg, s]['test_client_accuracies'] for s in SEEDS])
    row = rows[name]
    assert row['Runs'] == '2' and row['Rounds'] == '4'
    assert row['Accuracy % (mean ± std)'] == f'{np.mean(accs):.2f} ± {np.std(accs, ddof=1):.2f}'
    assert pivot[name][SETTING] == f'{np.mean(accs):.2f} ± {np.std(accs, ddof=1):.2f} (2)'
    assert row['Client mean %'] == f'{100 * np.mean(pooled):.2f}'
    worst = np.sort(pooled)[:2]            # 20 test clients -> the worst 2
    assert row['Worst 10% of clients %'] == f'{100 * np.mean(worst):.2f}'
    reached = [(s, _first_reaching(res[alg, s], target)) for s in SEEDS]
    reached = [(s, k) for s, k in reached if k is not None]
    if not reached:
      assert row[f'MB to {t}'] == 'not reached'
      continue
    mb = [_bytes_through(runs_dir / f'seed{s}' / alg, k) / 1e6 for s, k in reached]
    mb_mean[alg] = np.mean(mb)
    expect = _fmt(np.mean(mb)) + (f' ± {_fmt(np.std(mb, ddof=1))}' if len(mb) > 1 else '')
    expect += '' if len(reached) == 2 else ' (1/2 runs)'
    assert row[f'MB to {t}'] == expect
    flops = [_flops_through(runs_dir / f'seed{s}' / alg, k) for s, k in reached]
    if any(f is None or not np.isfinite(f) for f in flops):
      assert row[f'GFLOPs to {t}'] == 'n/a'   # metrics.csv has no (finite) client_flops
    else:
      gf = [f / 1e9 for f in flops]
      gf_mean[alg] = np.mean(gf)
      expect = _fmt(np.mean(gf)) + (f' ± {_fmt(np.std(gf, ddof=1))}' if len(gf) > 1 else '')
      assert row[f'GFLOPs to {t}'] == expect + ('' if len(reached) == 2 else ' (1/2 runs)')
  assert all(_first_reaching(res['fedavg', s], target) is not None for s in SEEDS)
  ratio_col = f"FedAvg's MB / GFLOPs to {t} ÷ this"
  assert rows['FedAvg'][ratio_col] == '1.00 / 1.00'
  if 'fedmeta_maml' in mb_mean:   # FedAvg's cost over MAML's (FedMeta Fig. 3's ratio)
    expect = f"{mb_mean['fedavg'] / mb_mean['fedmeta_maml']:.2f} / "
    expect += (f"{gf_mean['fedavg'] / gf_mean['fedmeta_maml']:.2f}"
               if 'fedmeta_maml' in gf_mean and 'fedavg' in gf_mean else 'n/a')
    assert rows['FedMeta(MAML)'][ratio_col] == expect
  else:
    assert rows['FedMeta(MAML)'][ratio_col] == '—'
  # vs FedAvg: per test client of the same seed, pooled over the seeds (hand computed)
  from scipy import stats  # pylint: disable=g-import-not-at-top
  d = 100 * np.concatenate([np.subtract(res['fedmeta_maml', s]['test_client_accuracies'],
                                        res['fedavg', s]['test_client_accuracies'])
                            for s in SEEDS])
  half = stats.t.ppf(0.975, len(d) - 1) * np.std(d, ddof=1) / np.sqrt(len(d))
  assert rows['FedMeta(MAML)']['vs FedAvg, per client (95% CI)'] == (
      f'{np.mean(d):+.2f} ± {half:.2f} (20 clients, 2 seed(s))')
  assert rows['FedAvg']['vs FedAvg, per client (95% CI)'] == '—'

  _, frows = _table((out / 'fairness.md').read_text(), SETTING)
  for alg, name in METHODS.items():
    pooled = 100 * np.concatenate([res[alg, s]['test_client_accuracies'] for s in SEEDS])
    assert frows[name]['Clients'] == '20'
    assert frows[name]['P50'] == f'{np.percentile(pooled, 50):.2f}'
    assert frows[name]['Std'] == f'{np.std(pooled):.2f}'
    assert frows[name]['Worst 10% (clients)'] == f'{np.mean(np.sort(pooled)[:2]):.2f} (2)'
  with open(out / 'report.csv', newline='') as f:
    assert [r['method'] for r in csv.DictReader(f)] == list(METHODS.values())


@pytest.mark.slow
def test_client_flops_give_gflops_to_target(runs_dir, tmp_path):
  runs = tmp_path / 'runs'
  shutil.copytree(runs_dir / 'seed0', runs)
  for alg in METHODS:   # exactly 2.5 GFLOPs per round, in the training loop's column
    path = runs / alg / 'metrics.csv'
    with open(path, newline='') as f:
      rows = list(csv.DictReader(f))
    fields = [k for k in rows[0] if k != 'client_flops'] + ['client_flops']
    with open(path, 'w', newline='') as f:
      w = csv.DictWriter(f, fieldnames=fields)
      w.writeheader()
      w.writerows({**r, 'client_flops': 2.5e9} for r in rows)
  res = _results(runs_dir, 'fedavg', 0)
  target = max(h['test_accuracy'] for h in res['history'])   # reached at some evaluation
  assert target > 0
  out = tmp_path / 'rep'
  result = report.build_report([str(runs)], str(out), f'digits={target}')
  row = next(r for r in result['rows'] if r['method'] == 'FedAvg')
  first = _first_reaching(res, target)
  assert first is not None and row['rounds_to_target'] == first
  assert row['gflops_to_target'] == pytest.approx(2.5 * first)
  assert row['mb_to_target'] == pytest.approx(_bytes_through(runs / 'fedavg', first) / 1e6)
  _, rows = _table(result['markdown'], SETTING)
  assert rows['FedAvg'][f'GFLOPs to {100 * target:g}%'] == _fmt(2.5 * first)
  _is_png(out / 'cost.png')


@pytest.mark.slow
def test_unreached_target_writes_no_cost_plot(runs_dir, tmp_path):
  out = tmp_path / 'rep'
  (out).mkdir()
  (out / 'cost.png').write_bytes(b'stale')
  result = report.build_report([str(runs_dir)], str(out), '1.0')
  reached_any = any(_first_reaching(_results(runs_dir, a, s), 1.0) is not None
                    for a in METHODS for s in SEEDS)
  assert (out / 'cost.png').exists() == reached_any
  if not reached_any:
    assert 'not reached' in result['markdown'] and 'no `cost.png`' in result['markdown']
  # No flag and a dataset without a paper target: no cost columns, and the report says why.
  result = report.build_report([str(runs_dir)], str(tmp_path / 'rep2'), '')
  assert 'No target accuracy for digits' in result['markdown']
  assert not (tmp_path / 'rep2' / 'cost.png').exists()


def _copy_run(runs_dir, dest, alg='fedavg', seed=0):
  shutil.copytree(runs_dir / f'seed{seed}' / alg, dest,
                  ignore=shutil.ignore_patterns('checkpoints', 'tensorboard'))
  return dest


@pytest.mark.slow
def test_malformed_run_folder_is_named_in_the_error(runs_dir, tmp_path):
  good = _copy_run(runs_dir, tmp_path / 'runs' / 'good')
  bad = _copy_run(runs_dir, tmp_path / 'runs' / 'bad', seed=1)
  (bad / 'results.json').write_text('{"summary": {"method": "FedAvg", ')   # truncated
  proc = _report(tmp_path / 'runs', tmp_path / 'rep')
  assert proc.returncode != 0
  assert f'run folder {bad}: results.json: cannot be read as JSON' in proc.stderr, proc.stderr
  assert 'Traceback' not in proc.stderr

  (bad / 'results.json').write_text(json.dumps({'summary': {'method': 'FedAvg'}}))
  with pytest.raises(run_folder.RunFolderError, match=f'{bad}: results.json: has no summary'):
    report.build_report([str(tmp_path / 'runs')], str(tmp_path / 'rep'))
  shutil.copy(good / 'results.json', bad / 'results.json')
  (bad / 'config.toml').write_text('algorithm = "fedavg"\nthis is not toml\n')
  with pytest.raises(run_folder.RunFolderError, match=f'{bad}: config.toml: cannot be read as TOML'):
    report.build_report([str(tmp_path / 'runs')], str(tmp_path / 'rep'))
  (bad / 'config.toml').write_text('algorithm = "fedavg"\n')
  with pytest.raises(run_folder.RunFolderError, match=f'{bad}: config.toml: has no dataset, model'):
    report.build_report([str(tmp_path / 'runs')], str(tmp_path / 'rep'))
  os.remove(bad / 'config.toml')
  with pytest.raises(run_folder.RunFolderError, match=f'{bad}: config.toml: missing'):
    report.build_report([str(tmp_path / 'runs')], str(tmp_path / 'rep'))
  shutil.copy(good / 'config.toml', bad / 'config.toml')
  os.remove(bad / 'metrics.csv')
  with pytest.raises(run_folder.RunFolderError, match=f'{bad}: metrics.csv: cannot be read'):
    report.build_report([str(tmp_path / 'runs')], str(tmp_path / 'rep'))
  lines = (good / 'metrics.csv').read_text().splitlines()
  (bad / 'metrics.csv').write_text('\n'.join(lines[:2]) + '\n')   # round 1 only
  with pytest.raises(run_folder.RunFolderError, match=f'{bad}: metrics.csv: ends at round 1'):
    report.build_report([str(tmp_path / 'runs')], str(tmp_path / 'rep'))

  proc = _report(tmp_path / 'nowhere', tmp_path / 'rep')
  assert proc.returncode != 0 and 'is not a folder' in proc.stderr
  with pytest.raises(run_folder.RunFolderError, match='not a fraction'):
    report.build_report([str(tmp_path / 'runs')], str(tmp_path / 'rep'), '74')


@pytest.mark.slow
def test_unfinished_runs_are_left_out_and_variants_are_not_averaged(runs_dir, tmp_path):
  runs = tmp_path / 'runs'
  _copy_run(runs_dir, runs / 'a', seed=0)
  _copy_run(runs_dir, runs / 'b', seed=1)
  other = _copy_run(runs_dir, runs / 'c', seed=1)
  cfg = (other / 'config.toml').read_text()
  assert 'client_lr = 0.3' in cfg
  (other / 'config.toml').write_text(cfg.replace('client_lr = 0.3', 'client_lr = 0.1', 1))
  going = runs / 'still_running'
  going.mkdir()
  shutil.copy(other / 'config.toml', going / 'config.toml')
  result = report.build_report([str(runs)], str(tmp_path / 'rep'), '0.5')
  assert result['unfinished'] == [str(going)]
  assert sorted(g.method for g in result['groups']) == [
      'FedAvg [client_lr=0.1]', 'FedAvg [client_lr=0.3]']
  assert [len(g.runs) for g in result['groups']] == [1, 2]
  assert f'left out, unfinished (no results.json): {going}' in result['markdown']
  # The same folder reached twice through overlapping --runs counts once.
  again = report.build_report([str(runs), str(runs / 'a')], str(tmp_path / 'rep'), '0.5')
  assert sum(len(g.runs) for g in again['groups']) == 3


@pytest.mark.slow
def test_a_key_missing_from_an_older_config_counts_as_its_default(runs_dir, tmp_path):
  """A config.toml written before a key existed had its default: its run is a seed of the same
  group as a newer run that writes the default, and a variant of one that sets another value."""
  runs = tmp_path / 'runs'
  _copy_run(runs_dir, runs / 'new', seed=0)
  old = _copy_run(runs_dir, runs / 'old', seed=1)
  cfg = (old / 'config.toml').read_text()
  assert 'max_concurrent_calls = -1\n' in cfg and 'dp_clip = ""\n' in cfg
  (old / 'config.toml').write_text(
      cfg.replace('max_concurrent_calls = -1\n', '').replace('dp_clip = ""\n', ''))
  result = report.build_report([str(runs)], str(tmp_path / 'rep'), '0.5')
  assert [(g.method, len(g.runs)) for g in result['groups']] == [('FedAvg', 2)]
  other = _copy_run(runs_dir, runs / 'other', seed=1)
  text = (other / 'config.toml').read_text()
  (other / 'config.toml').write_text(text.replace('max_concurrent_calls = -1',
                                                  'max_concurrent_calls = 2'))
  result = report.build_report([str(runs)], str(tmp_path / 'rep2'), '0.5')
  assert sorted((g.method, len(g.runs)) for g in result['groups']) == [
      ('FedAvg [max_concurrent_calls=-1]', 2), ('FedAvg [max_concurrent_calls=2]', 1)]


@pytest.mark.slow
def test_reference_flag_pairs_against_another_method(runs_dir, tmp_path):
  proc = _report(runs_dir, tmp_path / 'r', '--reference=fedmeta_maml')
  assert proc.returncode == 0, proc.stderr[-3000:]
  text = (tmp_path / 'r' / 'report.md').read_text()
  header, rows = _table(text, SETTING)
  column = 'vs FedMeta(MAML), per client (95% CI)'
  assert column in header and rows['FedMeta(MAML)'][column] == '—'
  clients = lambda alg, s: _results(runs_dir, alg, s)['test_client_accuracies']
  d = 100 * np.concatenate([np.subtract(clients('fedavg', s), clients('fedmeta_maml', s))
                            for s in SEEDS])
  assert rows['FedAvg'][column].startswith(f'{np.mean(d):+.2f} ± ')
  ratio_col = next(h for h in header if h.startswith("FedAvg's MB"))   # Fig. 3 stays on FedAvg
  assert rows['FedAvg'][ratio_col].startswith('1.00') or rows['FedAvg'][ratio_col] == '—'
  bad = _report(runs_dir, tmp_path / 'r2', '--reference=fedavg_meta')
  assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1] == (
      f'error: --reference=fedavg_meta: no finished run of that algorithm under {runs_dir}; '
      'use one of fedavg, fedmeta_maml')
