"""programs/compare.py: identical data for every method, mean over seeds, table and plot."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from tests.conftest import REPO

pytestmark = pytest.mark.slow   # runs programs as subprocesses


def test_compare_two_methods_two_seeds(tmp_path):
  out = tmp_path / 'cmp'
  proc = subprocess.run(
      [sys.executable, '-m', 'programs.compare', '--config=configs/demo/digits.toml',
       '--algorithms=fedavg,fedmeta_maml', '--seeds=2', '--rounds=4', '--eval_every=2',
       '--progress=false', f'--output_dir={out}'],
      cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'), capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert '| FedAvg |' in proc.stdout and '| FedMeta(MAML) |' in proc.stdout
  assert 'Mean over seeds [0, 1]' in proc.stdout
  with open(out / 'comparison.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  assert [r['method'] for r in rows] == ['FedAvg', 'FedMeta(MAML)']
  assert all(r['seeds'] == '2' for r in rows)
  for seed in (0, 1):
    for method in ('fedavg', 'fedmeta_maml'):
      assert (out / f'seed{seed}' / method / 'results.json').exists()
  # The per-method [method_hparams] of the demo config reached each run.
  fedavg = (out / 'seed0' / 'fedavg' / 'config.toml').read_text()
  assert 'client_lr = 0.3' in fedavg and 'local_epochs = 5' in fedavg
  assert 'server_lr = 0.01\n' in (out / 'seed0' / 'fedmeta_maml' / 'config.toml').read_text()
  png = (out / 'convergence.png').read_bytes()
  assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000
  # The paired column: MAML minus FedAvg per test client, pooled over both seeds, by hand.
  def clients(seed, method):
    with open(out / f'seed{seed}' / method / 'results.json') as f:
      return np.array(json.load(f)['test_client_accuracies'])
  d = 100 * np.concatenate([clients(s, 'fedmeta_maml') - clients(s, 'fedavg') for s in (0, 1)])
  half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
  assert float(rows[1]['vs_reference']) == pytest.approx(d.mean())
  assert float(rows[1]['vs_reference_ci95']) == pytest.approx(half)
  assert rows[0]['vs_reference'] == '' and float(rows[1]['vs_reference_clients']) == len(d)
  assert f'{d.mean():+.2f} ± {half:.2f} ({len(d)} clients, 2 seed(s))' in proc.stdout
  points = np.mean([float(r['query_examples']) for r in rows])
  assert f'so one example moves a run\'s accuracy by {100 / points:.2f} points' in proc.stdout
  assert 'vs FedAvg' in (out / 'comparison.md').read_text()
  # The settings each method ran with, from the config's [method_hparams], in print and file.
  line = ('Settings per method (the [method_hparams] of configs/demo/digits.toml, after any '
          'flags; the config says how they were chosen): FedAvg client_lr 0.3, local_epochs 5; FedMeta(MAML) '
          'inner_lr 0.1, inner_steps 1, server_lr 0.01.')
  assert line in proc.stdout and line in (out / 'comparison.md').read_text()
