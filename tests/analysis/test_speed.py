"""The speed CSVs as the results page shows them (`analysis.speed`): timing cells, the targets
table's verdicts, the ratios table and the scaling figure."""

import csv

import pytest

from tff_meta.analysis import speed

HEADER = ['model', 'parameters', 'clients', 'mode', 'TFF s/round', 'plain TF s/round', 'ratio',
          'TFF CPU s/round', 'plain TF CPU s/round', 'CPU ratio', 'state diff', 'load average']


def _write(path, rows):
  with open(path, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(HEADER)
    writer.writerows(rows)


def _row(model, clients, mode, tff, ref, load='2.0'):
  return [model, '1', str(clients), mode, f'{tff} [{tff * 0.9:.3f}-{tff * 1.5:.3f}]',
          f'{ref} [{ref * 0.9:.3f}-{ref * 1.2:.3f}]', f'{tff / ref:.2f}', '0.1', '0.1', '1.00',
          '1e-7', load]


def test_timing_cells():
  assert speed.timing('0.055 [0.044-0.148]') == (0.055, 0.044, 0.148)
  with pytest.raises(ValueError, match='not a timing cell'):
    speed.timing('0.055')


def test_targets_are_judged_on_every_run_at_a_quiet_load(tmp_path):
  _write(tmp_path / 'a.csv', [_row('mlp', 64, 'default', 0.030, 0.025, '1.1')])
  _write(tmp_path / 'b.csv', [_row('mlp', 64, 'default', 0.040, 0.025, '1.9')])
  _write(tmp_path / 'busy.csv', [_row('mlp', 64, 'default', 0.050, 0.025, '6.5')])
  conditions = {'model': 'mlp', 'clients': '64', 'mode': 'default'}
  targets = [speed.Target('one run', ('a.csv',), conditions, 1.5),
             speed.Target('both runs', ('a.csv', 'b.csv'), conditions, 1.5),
             speed.Target('busy run too', ('a.csv', 'busy.csv'), conditions, 1.5),
             speed.Target('busy only', ('busy.csv',), conditions, 1.5)]
  table = speed.targets_markdown(str(tmp_path), targets).splitlines()
  assert '| one run | 1.20 | 1.00 | ≤ 1.5 | met | 1.1 | a.csv |' in table
  assert '| both runs | 1.20, 1.60 | 1.00, 1.00 | ≤ 1.5 | not met | 1.1, 1.9 | a.csv, b.csv |' in table
  # A run at a load above the machine's cores is shown, not judged.
  assert '| busy run too | 1.20, 2.00 | 1.00, 1.00 | ≤ 1.5 | met | 1.1, 6.5 | a.csv, busy.csv |' \
      in table
  assert '| busy only | 2.00 | 1.00 | ≤ 1.5 | no run at that load | 6.5 | busy.csv |' in table
  with pytest.raises(ValueError, match='0 rows'):
    speed.targets_markdown(str(tmp_path), [speed.Target('x', ('a.csv',), {'model': 'cnn'}, 1.0)])


def test_ratios_table_shows_each_setting_and_a_cell_s_peak_as_program_plus_worker(tmp_path):
  header = ['part', 'setting', 'clients', 'TFF s/round', 'plain TF s/round', 'ratio',
            'TFF CPU s/round', 'plain TF CPU s/round', 'CPU ratio', 'program peak MB',
            'worker peak MB', 'peak MB', 'load average']
  with open(tmp_path / 'ratios.csv', 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerow(['4 clients', 'MLP, FedAvg', '4', '0.012 [0.010-0.020]',
                     '0.010 [0.009-0.011]', '1.20', '0.011', '0.010', '1.10', '', '', '', '1.5'])
    writer.writerow(['Table 2 cell', 'p=20%, FEMNIST CNN, FedMeta(MAML)', '4',
                     '1.100 [1.000-1.200]', '1.000 [0.900-1.100]', '1.10', '', '', '', '900',
                     '1500', '2400', '3.0'])
  table = speed.ratios_markdown(str(tmp_path / 'ratios.csv')).splitlines()
  assert table[2] == '| 4 clients | MLP, FedAvg | 0.012 | 0.010 | 1.20 | 1.10 | - | 1.5 |'
  assert table[3] == ('| Table 2 cell | p=20%, FEMNIST CNN, FedMeta(MAML) | 1.100 | 1.000 | 1.10 | '
                      '- | 2400 (900 + 1500) | 3.0 |')


def test_scaling_figure_draws_every_line(tmp_path):
  rows = [_row(m, n, mode, 0.01 * n, 0.008 * n) for m in ('mlp', 'femnist_cnn')
          for n in (4, 16) for mode in ('default', 'grouped', 'resident')]
  _write(tmp_path / 's.csv', rows)
  curves = speed.scaling_curves(speed.read_rows(str(tmp_path / 's.csv')), 'mlp')
  assert set(curves) == {'default', 'grouped', 'resident', 'plain TF'}
  assert curves['plain TF'] == [(4, 0.032, 0.029, 0.038), (16, 0.128, 0.115, 0.154)]
  rows = [_row('mlp', 4, mode, 0.1, ref) for mode, ref in (('default', 0.01), ('grouped', 0.03),
                                                           ('resident', 0.02))]
  _write(tmp_path / 't.csv', rows)
  (n, median, lo, hi), = speed.scaling_curves(speed.read_rows(str(tmp_path / 't.csv')),
                                              'mlp')['plain TF']
  assert (n, median, lo, hi) == (4, 0.02, 0.009, 0.036)   # median of medians, extreme min/max
  speed.scaling_figure([str(tmp_path / 's.csv')], str(tmp_path / 'fig.png'))
  assert (tmp_path / 'fig.png').read_bytes()[:4] == b'\x89PNG'
