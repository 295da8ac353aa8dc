"""research/privacy_curve/__main__.py: a tiny grid end to end, its resume, and its one-line errors."""

import csv
import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers import program_env
from tff_meta.classification import accounting

pytestmark = pytest.mark.slow   # runs programs as subprocesses

CONFIG = '''
name = "tiny_privacy"
dataset = "digits"
model = "mlp"
rounds = 3
clients_per_round = 8
support_fraction = 0.3
min_samples = 2
eval_every = 3
checkpoint_every = 3
dp_delta = 0.01
[data]
num_clients = 40
labels_per_client = 2
[model_options]
hidden_units = [8]
[hparams]
server_optimizer = "adam"
server_lr = 0.01
inner_lr = 0.1
'''


def _run(*args):
  return subprocess.run([sys.executable, '-m', 'research.privacy_curve', *map(str, args)],
                        cwd=REPO, env=program_env(), capture_output=True, text=True, timeout=900)


def _files(root):
  """path -> bytes of every file under `root`."""
  out = {}
  for folder, _, names in os.walk(root):
    for name in names:
      with open(os.path.join(folder, name), 'rb') as f:
        out[os.path.join(folder, name)] = f.read()
  return out


def _assert_one_error_line(proc, expect):
  assert proc.returncode != 0 and 'Traceback' not in proc.stderr, proc.stderr[-3000:]
  lines = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert len(lines) == 1 and expect in lines[0], proc.stderr[-3000:]


def _rows(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def test_grid_runs_resumes_and_refuses_another_setting(tmp_path):
  config = tmp_path / 'tiny.toml'
  config.write_text(CONFIG)
  out, figure = tmp_path / 'grid', tmp_path / 'figs' / 'curve.png'
  figure.parent.mkdir()
  args = [f'--config={config}', '--algorithms=fedmeta_maml', '--epsilons=8', '--seeds=0',
          f'--output_dir={out}', f'--figure={figure}']
  proc = _run(*args)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = _rows(out / 'privacy_curve.csv')
  assert [(r['algorithm'], float(r['target_epsilon'])) for r in rows] == [
      ('fedmeta_maml', math.inf), ('fedmeta_maml', 8.0)]
  free, private = rows
  population, m = int(free['population']), int(free['clients_per_round'])
  assert m == 8 and float(free['delta']) == 0.01
  # epsilon = inf: adaptive clipping without noise; its clip moved from TFF's start of 0.1.
  assert float(free['noise_multiplier']) == 0.0 and math.isinf(float(free['epsilon']))
  clip = float(free['clip'])
  assert clip > 0 and clip != pytest.approx(0.1)
  # epsilon = 8: that clip, fixed, and the accountant's z for 3 rounds of 8 of N clients.
  z = accounting.noise_multiplier_for(8.0, population=population, clients_per_round=8, rounds=3,
                                      delta=0.01)
  assert float(private['clip']) == pytest.approx(clip)
  assert float(private['noise_multiplier']) == pytest.approx(z)
  eps = float(private['epsilon'])
  assert 7.2 <= eps <= 8.0
  assert eps == pytest.approx(accounting.epsilon(z, population=population, clients_per_round=8,
                                                 rounds=3, delta=0.01))
  run_dir = out / 'seed0' / 'fedmeta_maml'
  assert 'dp_clip = "adaptive"' in (run_dir / 'eps_inf' / 'config.toml').read_text()
  saved = (run_dir / 'eps_8' / 'config.toml').read_text()
  assert f'dp_clip = "{float(private["clip"])!r}"' in saved
  summary = json.loads((run_dir / 'eps_8' / 'results.json').read_text())['summary']
  assert summary['epsilon'] == pytest.approx(eps)
  assert '| FedMeta(MAML) |' in (out / 'privacy_curve.md').read_text()
  assert figure.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'

  # Run again: every cell is read back, nothing retrains.
  before = _files(out / 'seed0')
  again = _run(*args)
  assert again.returncode == 0, again.stderr[-3000:]
  assert _files(out / 'seed0') == before
  assert _rows(out / 'privacy_curve.csv') == rows

  # Another round count in the same folder: one error line, nothing changed.
  other = _run(*args, '--rounds=4')
  _assert_one_error_line(other, 'rounds')
  assert _files(out / 'seed0') == before


@pytest.mark.parametrize('flag, expect', [
    ('--epsilons=0', '--epsilons'), ('--seeds=a', '--seeds'), ('--algorithms=nope', 'nope'),
])
def test_bad_flags_end_in_one_error_line(tmp_path, flag, expect):
  out = tmp_path / 'grid'
  proc = _run(f'--output_dir={out}', flag)
  _assert_one_error_line(proc, expect)
  assert not out.exists()
