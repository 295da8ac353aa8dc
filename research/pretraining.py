"""Do cells of one seed share their FedAvg pre-training? A check across run folders.

Fine-tuning via FedAvg and one-shot FL (Park et al. 2021, Section 5.1 and
Table 1) both start from `EPISODES * (R + 1)` rounds of FedAvg pre-training on
the meta-training classes. `research/queues/long_run.sh` runs them in separate
cells (`baselines/`, `oneshot/`); one-shot copies the baselines cell's
pre-training when it can and otherwise pre-trains the same rounds itself, with
the same config and seed. The comparison in Table 1 is fair only if both start
from the same model, so this module reads each cell's
`<run>/pretrain/metrics.csv` (round, seconds, train_loss) and compares the
training loss round by round between the runs of one setting, seed and
variant.

A copied pre-training repeats the `seconds` column too; one trained apart has
its own timings, so its equal losses are evidence, not a copy. No TensorFlow: it reads files
only. `python -m research.pretraining RUNS...` prints the table for the few-round run folders
under RUNS (the queue's cells).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.analysis import fewround_report
from tff_meta.core.tables import markdown_table
from tff_meta.core.run_folder import METRICS_FILE, PRETRAIN_DIR, read_by_key


def read_losses(folder: str) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """(rounds, seconds, train_loss) of `<folder>/pretrain/metrics.csv` (a round logged twice
  across a resume: its last row), or None without one."""
  path = os.path.join(folder, PRETRAIN_DIR, METRICS_FILE)
  losses = read_by_key(path, 'round', 'train_loss')
  if not losses:
    return None
  seconds = read_by_key(path, 'round', 'seconds')
  rounds = np.array(sorted(losses))
  return (rounds, np.array([seconds.get(r, np.nan) for r in rounds]),
          np.array([losses[r] for r in rounds]))


def compare(a: Tuple[np.ndarray, ...], b: Tuple[np.ndarray, ...]) -> Dict[str, Any]:
  """Loss agreement of two pre-trainings over the rounds both logged."""
  common, ia, ib = np.intersect1d(a[0], b[0], return_indices=True)
  diff = np.abs(a[2][ia] - b[2][ib])
  return dict(rounds=int(len(common)), last=int(common[-1]) if len(common) else 0,
              identical=int(np.sum(diff == 0)),
              max_abs_diff=float(diff.max()) if len(diff) else float('nan'),
              copied=bool(len(common)) and bool(np.array_equal(a[1][ia], b[1][ib])))


def agreement(groups: Dict[Tuple[str, int, str], Sequence[str]]) -> List[Dict[str, Any]]:
  """Per (setting label, seed, variant) -> run folders: each folder with a pre-training against
  the first such folder (runs of other variants are never compared; the variant is a key,
  not printed). Groups with fewer than two pre-trainings give no row."""
  rows = []
  for (label, seed, _), folders in sorted(groups.items()):
    logged = [(f, read_losses(f)) for f in sorted(folders)]
    logged = [(f, l) for f, l in logged if l is not None and len(l[0])]
    for folder, losses in logged[1:]:
      rows.append(dict(setting=label, seed=seed, run=folder, against=logged[0][0],
                       **compare(logged[0][1], losses)))
  return rows


def markdown(rows: Sequence[Dict[str, Any]]) -> Optional[str]:
  """## Pre-training shared by cells, or None when no two runs of a seed pre-trained."""
  if not rows:
    return None
  body = [[r['setting'], r['seed'], f"{r['run']} vs {r['against']}",
           f"{r['identical']:,} of {r['rounds']:,} (to round {r['last']:,})",
           f"{r['max_abs_diff']:.3g}", 'copied' if r['copied'] else 'trained apart']
          for r in rows]
  return '\n'.join([
      '## Pre-training shared by cells', '',
      'Training loss of the FedAvg pre-training (`pretrain/metrics.csv`), round by round, '
      'between runs of one setting, seed and variant. "copied": the timings repeat too.', '',
      markdown_table(['setting', 'seed', 'runs', 'rounds with equal loss', 'max abs. difference',
                      'pre-training'], body)])


def groups(runs, described=None
                       ) -> Dict[Tuple[str, int, str], List[str]]:
  """(setting label, seed, variant) -> the run folders, for `pretraining.agreement`: the cells
  that must share a FedAvg pre-training (fine-tuning via FedAvg, one-shot FL)."""
  described = fewround_report._described(runs) if described is None else described
  groups: Dict[Tuple[str, int, str], List[str]] = {}
  for run in runs:
    setting, variant = described[run.path]
    key = ', '.join(f'{k}={v}' for k, v in sorted(variant.items()))
    groups.setdefault((setting.label, run.seed, key), []).append(run.path)
  return groups


def main(argv: Sequence[str]) -> int:
  runs = fewround_report.find_runs(argv)
  text = markdown(agreement(groups(runs)))
  print(text if text is not None else 'no two runs of one setting, seed and variant pre-trained')
  return 0


if __name__ == '__main__':
  raise SystemExit(main(sys.argv[1:]))
