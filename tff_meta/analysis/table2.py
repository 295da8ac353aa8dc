"""FedMeta Table 2 on FEMNIST from one folder of runs: the table, the paired differences, the
targets and the cost to 74%, as results-page blocks (`analysis.results_page`).

FedMeta (Chen et al. 2018, "Federated Meta-Learning with Fast Convergence and Efficient
Communication", arXiv:1802.07876) Table 2 gives test accuracy on FEMNIST for FedAvg,
FedAvg(Meta), FedMeta(MAML) and FedMeta(Meta-SGD) at 20%, 50% and 90% support; Fig. 2 the
accuracy against rounds and over clients; Fig. 3 the bytes and FLOPs to a target accuracy.

The folder holds what `research/queues/table2_femnist.sh` writes (checkpoints left out):

- `table2_femnist_p<support>_<method>_seed<seed>/`: a run folder (config.toml, eval.csv,
  metrics.csv, results.json, provenance.csv); `<method>` is fedavg (trained at 20% only),
  maml, fomaml (20% only) or metasgd;
- `scores/p<support>/<run folder name>.json`: `programs.evaluate --markdown=false`'s scores
  of a run's test writers at that support; the fedavg run's hold two rows, finetune_epochs =
  0 (FedAvg) and 1 (FedAvg(Meta)): one training per seed scored both ways.

A page shows them as blocks, each naming the folder:

    <!-- block table2: docs/runs/fedmeta_308 -->
    <!-- /block -->

(`table2_paired`, `table2_targets`, `table2_cost` likewise; the figures are
`page_figures`' `table2_curves` and `table2_cost` kinds). A cell's number is the accuracy
over all query points of its test writers, mean ± sample std over seeds
(`tables.seed_std`); a cell with fewer than `MIN_SEEDS` seeds says so, and the targets are
not decided on it. Reads files only (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.analysis import rescored
from tff_meta.analysis.page_sources import code_versions, spread
from tff_meta.analysis.tables import markdown_table
from tff_meta.core import config_file
from tff_meta.core import run_folder

SUPPORTS = (20, 50, 90)
# Table 2's rows (the scores' labels), the training run's method in the folder name, the
# paper's key in configs/fedmeta/paper_table2.toml (None: not in the paper's table) and the
# supports at which the queue runs it.
ROWS = (('FedAvg', 'fedavg', 'fedavg', SUPPORTS),
        ('FedAvg(Meta)', 'fedavg', 'fedavg_meta', SUPPORTS),
        ('FedMeta(MAML)', 'maml', 'maml', SUPPORTS),
        ('FedMeta(FOMAML)', 'fomaml', None, (20,)),
        ('FedMeta(Meta-SGD)', 'metasgd', 'metasgd', SUPPORTS))
TRAINED_AT = {'fedavg': 20}     # trained at one support, scored at every support
REFERENCE = 'FedAvg(Meta)'      # the paired differences' reference
META = ('FedMeta(MAML)', 'FedMeta(Meta-SGD)')   # the meta-learners the targets name
MIN_SEEDS = 3                   # seeds a cell needs to decide a target
WITHIN = 3.0                    # points: a meta-learner cell's target is >= paper - WITHIN
TARGET_ACCURACY = 0.74          # Fig. 3's target test accuracy
SLOPE_ROUNDS = 500              # the validation curve's slope over the last rounds
PAPER_FILE = os.path.join(config_file.shipped_configs_folder(), 'fedmeta', 'paper_table2.toml')
FOLDER_RE = re.compile(r'table2_femnist_p(\d+)_(\w+?)_seed(\d+)$')
NOTE = (f'Ours: accuracy % over all query points of the test writers, mean ± sample std over '
        f'seeds (ddof = 1), n = the number of seeds; a cell with fewer than {MIN_SEEDS} seeds '
        'says so. FedAvg and FedAvg(Meta) come from one training per seed (the FedAvg run, '
        'trained at 20% support), scored twice at each support: as trained (FedAvg) and after '
        "one epoch of fine-tuning on each test writer's support set (FedAvg(Meta)). Paper: "
        'FedMeta Table 2 as printed.')


@dataclasses.dataclass
class Table2:
  """The runs of one folder: per (support, row label), seed -> score; per (support, folder
  method), seed -> run folder."""
  root: str
  scores: Dict[Tuple[int, str], Dict[int, rescored.Score]]
  folders: Dict[Tuple[int, str], Dict[int, str]]

  def accuracy(self, support: int, label: str) -> Dict[int, float]:
    """seed -> accuracy in percent of the cell."""
    return {s: 100 * x.accuracy for s, x in sorted(self.scores.get((support, label), {}).items())}

  def trained_by(self, support: int, label: str) -> Dict[int, str]:
    """seed -> the run folder that trained the cell's model."""
    method = next(m for name, m, _, _ in ROWS if name == label)
    return self.folders.get((TRAINED_AT.get(method, support), method), {})


def read(root: str) -> Table2:
  """The run folders and scores under `root`; ValueError for a score of no row."""
  if not os.path.isdir(root):
    raise ValueError(f'{root}: no such folder; copy the Table 2 runs there '
                     '(research/queues/table2_femnist.sh) first')
  folders: Dict[Tuple[int, str], Dict[int, str]] = {}
  for name in sorted(os.listdir(root)):
    m = FOLDER_RE.match(name)
    if m and os.path.isdir(os.path.join(root, name)):
      folders.setdefault((int(m.group(1)), m.group(2)), {})[int(m.group(3))] = \
          os.path.join(root, name)
  labels = {name for name, _, _, _ in ROWS}
  scores: Dict[Tuple[int, str], Dict[int, rescored.Score]] = {}
  for support in SUPPORTS:
    folder = os.path.join(root, 'scores', f'p{support}')
    if not os.path.isdir(folder) or not any(f.endswith('.json') for f in os.listdir(folder)):
      continue
    for score in rescored.read(folder)[0]:
      if score.method not in labels:
        raise ValueError(f'{score.source}: a score of {score.method!r}, not a row of Table 2 '
                         f'({", ".join(sorted(labels))})')
      cell = scores.setdefault((support, score.method), {})
      if score.seed in cell:
        raise ValueError(f'{score.source} and {cell[score.seed].source}: two scores of '
                         f'{score.method} seed {score.seed} at {support}%; keep one')
      cell[score.seed] = score
  return Table2(root, scores, folders)


def paper() -> Dict[str, Dict[str, List[float]]]:
  """The paper's FEMNIST cells: key -> {'p20': [mean, std], ...}."""
  return config_file.load_toml(PAPER_FILE, see='configs/fedmeta/paper_table2.toml in the '
                               'repository')['femnist']


def _ours(values: Dict[int, float]) -> str:
  if not values:
    return 'missing: no scores'
  text = spread(list(values.values()))
  if len(values) < MIN_SEEDS:
    seeds = ', '.join(map(str, values))
    return f'{text} (only {len(values)} seed{"s" if len(values) > 1 else ""}: {seeds})'
  return f'{text} (n = {len(values)})'


def table_markdown(root: str) -> str:
  """Table 2's FEMNIST rows: ours beside the paper's per support, and each row's commits."""
  t, printed = read(root), paper()
  header = ['Method']
  for s in SUPPORTS:
    header += [f'{s}%: ours, mean ± std (n seeds)', 'paper']
  header.append('Code')
  body = []
  for label, _, key, supports in ROWS:
    row = [label]
    for s in SUPPORTS:
      if s not in supports:
        row += ['not in the plan', '—']
        continue
      row.append(_ours(t.accuracy(s, label)))
      row.append('—' if key is None else '{:.2f} ± {:.2f}'.format(*printed[key][f'p{s}']))
    folders = sorted({f for s in supports for f in t.trained_by(s, label).values()})
    row.append(code_versions(folders) if folders else 'no run folder')
    body.append(row)
  return markdown_table(header, body) + '\n\n' + NOTE


def _paired(t: Table2, support: int, label: str) -> Optional[Dict[str, float]]:
  ref = list(t.scores.get((support, REFERENCE), {}).values())
  return rescored.paired(list(t.scores.get((support, label), {}).values()), ref)


def _pm(diff: float, ci: float) -> str:
  return (f'{diff:+.2f}' + (f' ± {ci:.2f}' if np.isfinite(ci) else '')).replace('-', '−')


def paired_markdown(root: str) -> str:
  """Each method minus FedAvg(Meta) per test writer, pooled over seeds, with a 95% CI."""
  t = read(root)
  header = [f'Method − {REFERENCE}'] + [f'{s}%: per writer, mean ± 95% CI (writers × seeds)'
                                        for s in SUPPORTS]
  body = []
  for label, _, _, supports in ROWS:
    if label == REFERENCE:
      continue
    row = [label]
    for s in SUPPORTS:
      pair = _paired(t, s, label) if s in supports else None
      row.append('—' if pair is None else
                 f"{_pm(pair['diff'], pair['ci95'])} ({pair['clients'] // pair['seeds']} × "
                 f"{pair['seeds']})")
    body.append(row)
  return markdown_table(header, body) + '\n\n' + (
      f"Per test writer: the method's accuracy minus {REFERENCE}'s on the same writer and "
      'query set (same seed), in points, pooled over the seeds both have; ± is the half-width '
      "of Student's t 95% confidence interval of the mean over those pooled differences "
      '(n − 1 degrees of freedom, n = writers × seeds).')


def validation_slope(folders: Sequence[str], last: int = SLOPE_ROUNDS) -> float:
  """The least-squares slope of validation accuracy (points per 100 rounds) over each run's
  last `last` rounds of eval.csv, the mean over runs; nan when no run has two evaluations."""
  slopes = []
  for folder in folders:
    curve = run_folder.read_by_key(os.path.join(folder, run_folder.EVAL_FILE), 'round',
                                   'validation_accuracy')
    end = max(curve, default=0)
    window = sorted(k for k in curve if k >= end - last)
    if len(window) >= 2:
      x = np.asarray(window, np.float64)
      y = 100 * np.asarray([curve[k] for k in window])
      slopes.append(100 * np.polyfit(x, y, 1)[0])
  return float(np.mean(slopes)) if slopes else float('nan')


def targets(root: str) -> List[Dict[str, Any]]:
  """The issue's targets: per row, target, column, measured, met (True / False / None:
  not decided) and the shortfall or why it is not decided."""
  t, printed = read(root), paper()
  out = []

  def short(label: str, s: int) -> Optional[str]:
    n = len(t.accuracy(s, label))
    return None if n >= MIN_SEEDS else f'{label} has {n} seed{"s" if n != 1 else ""}'

  for s in SUPPORTS:
    names = ('FedAvg', REFERENCE) + META
    missing = [short(n, s) for n in names if short(n, s)]
    mean = {n: float(np.mean(list(t.accuracy(s, n).values()) or [np.nan])) for n in names}
    row = dict(target='FedAvg < FedAvg(Meta) < MAML and Meta-SGD (seed means)', column=s,
               measured='{} < {} < {} and {}'.format(
                   *(f'{v:.2f}' if np.isfinite(v) else '—' for v in mean.values())))
    if missing:
      row.update(met=None, why='; '.join(missing))
    else:
      pairs = [('FedAvg', REFERENCE), (REFERENCE, META[0]), (REFERENCE, META[1])]
      wrong = [f'{b} is {mean[a] - mean[b]:.2f} below {a}' if mean[b] < mean[a] else
               f'{b} equals {a}' for a, b in pairs if not mean[a] < mean[b]]
      row.update(met=not wrong, why='; '.join(wrong))
    out.append(row)
  pair = _paired(t, 20, META[0])
  row = dict(target=f'{META[0]} − {REFERENCE} per writer: 95% CI above 0', column=20)
  if pair is None or short(META[0], 20) or short(REFERENCE, 20):
    row.update(measured='—', met=None, why=short(META[0], 20) or short(REFERENCE, 20) or
               'no paired writers')
  else:
    low = pair['diff'] - pair['ci95']
    row.update(measured=f"{_pm(pair['diff'], pair['ci95'])} (CI from {low:.2f})".replace(
        '-', '−'), met=bool(low > 0), why='' if low > 0 else
               f'the interval reaches {low:.2f}, {-low:.2f} under 0'.replace('-', '−'))
  out.append(row)
  for s in SUPPORTS:
    for label, _, key, _ in ROWS:
      if label not in META:
        continue
      floor = printed[key][f'p{s}'][0] - WITHIN
      values = t.accuracy(s, label)
      ours = float(np.mean(list(values.values()))) if values else float('nan')
      row = dict(target=f'{label} ≥ the paper\'s cell − {WITHIN:g} ({floor:.2f})', column=s,
                 measured='—' if not values else f'{ours:.2f} (paper {floor + WITHIN:.2f})')
      if short(label, s):
        row.update(met=None, why=short(label, s))
      elif ours >= floor:
        row.update(met=True, why='')
      else:
        slope = validation_slope(list(t.trained_by(s, label).values()))
        row.update(met=False, why=f'{floor - ours:.2f} short; validation accuracy over the '
                   f'last {SLOPE_ROUNDS} rounds: {slope:+.2f} points per 100 rounds '
                   '(least squares, mean over seeds)'.replace('-', '−'))
      out.append(row)
  return out


def targets_markdown(root: str) -> str:
  rows = targets(root)
  verdict = lambda r: ('met' if r['met'] else
                       'not decided' if r['met'] is None else 'not met') + (
                           f": {r['why']}" if r['why'] else '')
  return markdown_table(['Target', 'Support', 'Measured', 'Verdict'],
                        [[r['target'], f"{r['column']}%", r['measured'], verdict(r)]
                         for r in rows]) + '\n\n' + (
      f'Seed means as in Table 2; a target is decided on cells of {MIN_SEEDS} seeds or more.')


def cost(root: str, target: float = TARGET_ACCURACY) -> List[Dict[str, Any]]:
  """Per method trained at 20% (FedAvg(Meta) has no curve of its own), per seed: the first
  evaluation round of eval.csv whose test accuracy reaches `target`, and the bytes (down +
  up) and client FLOPs of metrics.csv summed over rounds 1..that round; None: not reached."""
  t = read(root)
  out = []
  for label, method, _, _ in ROWS:
    if label == REFERENCE:
      continue
    per_seed = {}
    for seed, folder in sorted(t.trained_by(20, label).items()):
      curve = run_folder.read_by_key(os.path.join(folder, run_folder.EVAL_FILE), 'round',
                                     'test_accuracy')
      k = next((k for k in sorted(curve) if curve[k] >= target - 1e-9), None)
      if k is None:
        per_seed[seed] = None
        continue
      mb, flops = run_folder.load_run(folder).cost_at(k)
      per_seed[seed] = dict(rounds=k, bytes=mb, flops=float('nan') if flops is None else flops)
    out.append(dict(method=label, seeds=per_seed))
  return out


def cost_markdown(root: str) -> str:
  body = []
  for r in cost(root):
    reached = {s: v for s, v in r['seeds'].items() if v is not None}
    if not r['seeds']:
      body.append([r['method'], 'no run', '—', '—', '—'])
      continue
    if not reached:
      body.append([r['method'], f"0 of {len(r['seeds'])}", 'not reached', 'not reached',
                   'not reached'])
      continue
    col = lambda key, scale, digits: spread([v[key] / scale for v in reached.values()], digits)
    body.append([r['method'], f"{len(reached)} of {len(r['seeds'])}" + (
        f" (seeds {', '.join(map(str, reached))})" if len(reached) < len(r['seeds']) else ''),
                 col('rounds', 1, 0), col('bytes', 1e6, 0), col('flops', 1e9, 0)])
  return markdown_table(
      ['Method (20% support)', 'Seeds reaching 74%', 'Rounds, mean ± std',
       'MB down + up, mean ± std', 'Client GFLOPs, mean ± std'], body) + '\n\n' + (
      f'To the first evaluation whose test accuracy reaches {TARGET_ACCURACY:.0%} (eval.csv), '
      'the bytes down + up and client FLOPs of metrics.csv summed over rounds 1 to that round; '
      'mean ± sample std over the seeds that reach it. FedAvg(Meta) has no curve of its own '
      '(its model is FedAvg\'s, fine-tuned at test time only).')


BLOCKS = {'table2': table_markdown, 'table2_paired': paired_markdown,
          'table2_targets': targets_markdown, 'table2_cost': cost_markdown}


def main(argv: Sequence[str]) -> int:
  """`python -m tff_meta.analysis.table2 <folder>`: prints every block, for a look before the
  page is written."""
  if len(argv) != 1:
    print('error: give one folder of Table 2 runs, e.g. docs/runs/fedmeta_308', file=sys.stderr)
    return 2
  try:
    for kind, block in BLOCKS.items():
      print(f'<!-- block {kind}: {argv[0]} -->\n{block(argv[0])}\n<!-- /block -->\n')
  except (ValueError, OSError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
