"""programs/compare.py: identical data for every method, mean over seeds, table and plot."""

import csv
import os
import subprocess
import sys

from tests.conftest import REPO


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
