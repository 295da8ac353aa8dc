"""benchmarks/ratios.py, the one command behind the results page's speed section: a Table 2
cell's row from its run's numbers (by hand: medians of rounds 2.., their ratio, the peak as
program + worker), and one timed setting end to end, whose TFF and plain-TF states agree."""

import importlib
import os
import sys

from absl import flags
import pytest

from benchmarks import common, processes
from tests.conftest import FIXTURES, REPO


@pytest.fixture
def ratios():
  """benchmarks.ratios with its flags at their defaults; its flags and the module are removed
  afterwards (absl defines a flag once per process)."""
  before, parsed = set(flags.FLAGS), flags.FLAGS.is_parsed()
  sys.modules.pop('benchmarks.ratios', None)
  module = importlib.import_module('benchmarks.ratios')
  if not parsed:
    flags.FLAGS.mark_as_parsed()
  yield module
  for name in set(flags.FLAGS) - before:
    delattr(flags.FLAGS, name)
  if not parsed:
    flags.FLAGS.unparse_flags()
  sys.modules.pop('benchmarks.ratios', None)


def _set(**values):
  for name, value in values.items():
    flags.FLAGS[name].value = value


def test_a_cell_row_is_its_runs_medians_and_peaks(ratios, monkeypatch, tmp_path):
  runs = []

  def run_program(config, rounds, output_dir, train_flags, *, cwd, poll_s):
    runs.append((config, rounds, output_dir, list(train_flags), cwd, poll_s))
    return processes.ProgramRun(program_peak_mb=1500.4, worker_peak_mb=1300.4, worker_cpu_s=9.0,
                                metrics=[{'round_seconds': s} for s in ('9.0', '2.0', '4.0')])
  monkeypatch.setattr(processes, 'run_program', run_program)
  monkeypatch.setattr(ratios, 'plain_cell', lambda config, cache_dir: {
      'setting': 'p=20%, MLP, FedMeta(MAML)', 'clients': 4, 'seconds': [5.0, 1.0, 2.0]})
  cell = 'configs/fedmeta/table2_femnist_p20_maml.toml'
  _set(cells=[cell], rounds=3, train_flags=['--model=mlp'])
  (row,) = list(ratios.cell_rows('data_dir', str(tmp_path)))
  assert runs == [(cell, 3, str(tmp_path / 'cell0'), ['--cache_dir=data_dir', '--model=mlp'],
                   REPO, 0.2)]
  assert len(row) == len(ratios.HEADER) and float(row[-1]) >= 0   # the load average
  assert row[:-1] == [
      'Table 2 cell', 'p=20%, MLP, FedMeta(MAML)', '4',
      '3.000 [2.000-4.000]', '1.500 [1.000-2.000]', '2.00',   # rounds 2-3: 3.0 / 1.5
      '', '', '',                                             # no CPU times for a cell
      '1500', '1300', '2801']                                 # the sum of the unrounded peaks


def test_every_table2_femnist_config_is_a_cell(ratios, monkeypatch, tmp_path):
  seen = []
  monkeypatch.setattr(processes, 'run_program', lambda config, *a, **k: seen.append(config) or
                      processes.ProgramRun(1.0, 1.0, 0.0, [{'round_seconds': '1.0'}]))
  monkeypatch.setattr(ratios, 'plain_cell', lambda config, cache_dir: {
      'setting': config, 'clients': 4, 'seconds': [0.5]})
  rows = list(ratios.cell_rows('data_dir', str(tmp_path)))
  assert len(seen) > 10 and seen == sorted(seen) and all(
      os.path.basename(c).startswith('table2_femnist_p') for c in seen)
  assert {r[5] for r in rows} == {'2.00'}   # one round: its own time, not rounds 2..


@pytest.mark.slow   # a TFF worker, the MLP's FedMeta(MAML) round traced and run
def test_one_timed_setting_end_to_end(ratios, monkeypatch):
  checks = []

  def time_setting(*args, **kwargs):
    times, check = common_time_setting(*args, **kwargs)
    checks.append(check)
    return times, check
  common_time_setting = common.time_setting
  monkeypatch.setattr(common, 'time_setting', time_setting)
  _set(algorithms=['fedmeta_maml'], model4='mlp', clients4=2, models64=[], clients64=2,
       examples=20, calls=1, warmup=0)
  with ratios.WorkerPool.local(1) as pool:
    (row,) = list(ratios.timed_rows(pool, os.path.join(FIXTURES, 'tff')))
  assert row[:3] == ['2 clients', 'MLP, FedMeta(MAML)', '2'] and len(row) == len(ratios.HEADER)
  (check,) = checks   # time_setting asserts it too: TFF and plain TF reach the same state
  assert check < common.TOLERANCE
  tff, ref = (float(row[ratios.HEADER.index(k)].split()[0]) for k in ('TFF s/round',
                                                                      'plain TF s/round'))
  assert tff > 0 and ref > 0 and float(row[ratios.HEADER.index('ratio')]) > 0
