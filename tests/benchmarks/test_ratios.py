"""benchmarks/ratios.py: the one command behind the results page's speed section, at tiny
sizes (--quick): every part's rows, ratios of the medians, a cell's peak as program + worker."""

import csv
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers import program_env

pytestmark = pytest.mark.slow   # runs programs.train and a TFF worker as subprocesses


def test_quick_run_writes_every_part(tmp_path):
  subprocess.run([sys.executable, '-m', 'benchmarks.ratios', '--quick',
                  f'--output_dir={tmp_path}'], cwd=REPO, env=program_env(), check=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
  with open(tmp_path / 'ratios.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  assert [(r['part'], r['setting']) for r in rows] == [
      ('2 clients', 'MLP, FedAvg'), ('2 clients', 'MLP, FedMeta(MAML)'),
      ('2 clients', 'MLP, FedMeta(FOMAML)'), ('2 clients', 'MLP, FedMeta(Meta-SGD)'),
      ('4 clients', 'MLP, FedMeta(MAML)'), ('Table 2 cell', 'p=20%, MLP, FedMeta(MAML)')]
  half = 0.0005   # the medians are written to 3 decimals; the ratio is of the unrounded ones
  for r in rows:
    tff, ref = (float(r[k].split()[0]) for k in ('TFF s/round', 'plain TF s/round'))
    assert (tff - half) / (ref + half) - 0.01 <= float(r['ratio']) <= (tff + half) / (ref - half) + 0.01
  cell = rows[-1]
  assert float(cell['program peak MB']) > 100 and float(cell['worker peak MB']) > 10
  assert int(cell['peak MB']) == pytest.approx(
      float(cell['program peak MB']) + float(cell['worker peak MB']), abs=1)
  text = (tmp_path / 'ratios.md').read_text()
  assert 'command: python -m benchmarks.ratios --quick' in text and 'after: load average' in text
