"""Pre-training shared by cells (research/pretraining.py), on pretrain/metrics.csv files
written as `programs.train` writes them, checked by hand; grouped by the few-round report's setting, seed and
variant."""

import csv
import dataclasses
import os

import pytest

from tff_meta.analysis import fewround_report
from research import pretraining
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import experiment

LOSSES = [4.6, 3.7, 2.9, 2.5, 2.25]


def _pretrain(folder, losses, seconds=None, first_round=1):
  os.makedirs(folder / 'pretrain', exist_ok=True)
  with open(folder / 'pretrain' / 'metrics.csv', 'w', newline='') as f:
    out = csv.writer(f)
    out.writerow(['round', 'seconds', 'train_loss'])
    for i, loss in enumerate(losses):
      out.writerow([first_round + i, (seconds or [1.0] * len(losses))[i], repr(loss)])


def test_equal_losses_trained_apart_copied_and_a_difference(tmp_path):
  _pretrain(tmp_path / 'a', LOSSES, seconds=[9.0, 1.2, 1.1, 1.3, 1.2])
  _pretrain(tmp_path / 'b', LOSSES, seconds=[8.0, 1.0, 1.4, 1.2, 1.1])     # its own timings
  _pretrain(tmp_path / 'c', LOSSES, seconds=[9.0, 1.2, 1.1, 1.3, 1.2])     # a copy of a
  _pretrain(tmp_path / 'd', [4.6, 3.7, 2.8, 2.5, 2.25])                    # round 3 differs
  a, b, c, d = (pretraining.read_losses(str(tmp_path / x)) for x in 'abcd')
  assert pretraining.compare(a, b) == dict(rounds=5, last=5, identical=5, max_abs_diff=0.0,
                                           copied=False)
  assert pretraining.compare(a, c)['copied'] and pretraining.compare(a, c)['identical'] == 5
  diff = pretraining.compare(a, d)
  assert (diff['identical'], diff['copied']) == (4, False)
  assert diff['max_abs_diff'] == pytest.approx(0.1)


def test_only_the_rounds_both_logged_are_compared(tmp_path):
  _pretrain(tmp_path / 'a', LOSSES)
  _pretrain(tmp_path / 'b', LOSSES[2:], first_round=3)   # resumed from round 2's checkpoint
  got = pretraining.compare(*(pretraining.read_losses(str(tmp_path / x)) for x in 'ab'))
  assert (got['rounds'], got['last'], got['identical']) == (3, 5, 3)
  assert pretraining.read_losses(str(tmp_path / 'none')) is None


def test_groups_without_two_pre_trainings_give_no_rows(tmp_path):
  _pretrain(tmp_path / 'a', LOSSES)
  (tmp_path / 'frl').mkdir()       # a cell that does not pre-train
  assert pretraining.agreement({('IID', 0, ''): [str(tmp_path / 'a'), str(tmp_path / 'frl')]}) == []
  assert pretraining.markdown([]) is None


def _cell(folder, methods, seed, **changes):
  cfg = dataclasses.replace(config_lib.FewRoundConfig(), test_rounds=(1,), methods=methods,
                            seed=seed, output_dir=str(folder), **changes)
  os.makedirs(folder, exist_ok=True)
  row = {'method': methods[0], 'seconds': 1.0, 'info': {},
         'accuracy': {'1': {'mean': 0.5, 'ci95': 0.1, 'episodes': 2, 'text': '',
                            'per_episode': [0.4, 0.6]}}}
  experiment.write(cfg, str(folder), [row])


def test_report_compares_cells_of_one_setting_seed_and_variant_only(tmp_path):
  for seed in (0, 1):
    _cell(tmp_path / 'baselines' / f'seed{seed}', ('finetune_fedavg',), seed)
    _cell(tmp_path / 'oneshot' / f'seed{seed}', ('finetune_oneshot',), seed)
    _pretrain(tmp_path / 'baselines' / f'seed{seed}', [x + seed for x in LOSSES],
              seconds=[1.0, 2.0, 3.0, 4.0, 5.0])
    _pretrain(tmp_path / 'oneshot' / f'seed{seed}', [x + seed for x in LOSSES])
  _cell(tmp_path / 'noniid' / 'seed0', ('finetune_oneshot',), 0, iid=False)     # another setting
  _pretrain(tmp_path / 'noniid' / 'seed0', [9.0] * 5)
  _cell(tmp_path / 'rates' / 'seed0', ('finetune_oneshot',), 0, inner_lr=0.5)   # another variant
  _pretrain(tmp_path / 'rates' / 'seed0', [9.0] * 5)
  runs = fewround_report.find_runs([str(tmp_path)])
  rows = pretraining.agreement(pretraining.groups(runs))
  assert [(r['seed'], os.path.relpath(r['run'], tmp_path), r['identical'], r['copied'])
          for r in rows] == [(0, 'oneshot/seed0', 5, False), (1, 'oneshot/seed1', 5, False)]
  md = pretraining.markdown(rows)
  assert '## Pre-training shared by cells' in md
  assert md.count('5 of 5 (to round 5) | 0 | trained apart |') == 2


def test_a_round_logged_twice_across_a_resume_counts_its_last_row(tmp_path):
  _pretrain(tmp_path / 'a', LOSSES)
  _pretrain(tmp_path / 'b', [4.6, 3.7, 9.9])                 # killed after round 3 ...
  with open(tmp_path / 'b' / 'pretrain' / 'metrics.csv', 'a', newline='') as f:
    csv.writer(f).writerows([[3, 1.0, repr(2.9)], [4, 1.0, repr(2.5)], [5, 1.0, repr(2.25)]])
  rounds, _, losses = pretraining.read_losses(str(tmp_path / 'b'))   # ... resumed at round 2
  assert list(rounds) == [1, 2, 3, 4, 5] and list(losses) == LOSSES
  got = pretraining.compare(pretraining.read_losses(str(tmp_path / 'a')), (rounds, _, losses))
  assert (got['rounds'], got['identical']) == (5, 5)
