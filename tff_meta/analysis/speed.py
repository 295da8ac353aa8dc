"""The speed benchmarks' CSVs as the results page shows them: the targets table, the
one-run ratios table and the scaling figure (seconds per round against clients per round,
log-log).

The CSVs are `benchmarks/scaling.py`'s and `benchmarks/round_overhead.py`'s
(`--csv`) and `benchmarks/ratios.py`'s `ratios.csv`: one row per setting, timings written `median [min-max]`, the ratio
of the TFF and plain-TF medians measured in one run with the calls
alternating, and the load average when the row was measured. Like the rest
of `tff_meta.analysis`, no TensorFlow.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import re
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

from tff_meta.analysis.figures import _panels, _pyplot, _save
from tff_meta.core.tables import markdown_table

TIMING_RE = re.compile(r'([\d.]+) \[([\d.]+)-([\d.]+)\]')

# The figure's lines: (mode in the CSV, or 'plain TF' for the reference column, label, style).
LINES = (('default', 'TFF, default (programs.train)', 'C0', 'o-'),
         ('grouped', 'TFF, all clients in one call', 'C1', 's--'),
         ('resident', 'TFF, one client per call', 'C2', '^-.'),
         ('plain TF', 'plain TF, one graph', 'k', 'x:'))
MODEL_NAMES = {'mlp': 'MLP', 'femnist_cnn': 'FEMNIST CNN', 'logistic_regression': 'logistic'}


# A verdict counts the runs measured at a load average of at most the machine's 2 cores. Above
# that, other jobs take CPU from TFF's two processes (the program and its worker) more than
# from plain TF's one, and the wall ratio measures the machine's load, not TFF; the table
# still shows every run.
QUIET_LOAD = 2.0


@dataclasses.dataclass(frozen=True)
class Target:
  """A speed target: the rows (`conditions` on the CSVs' columns) of each run's file."""
  label: str
  files: Tuple[str, ...]        # one per run, relative to the folder the page names
  conditions: Mapping[str, str]
  target: float                 # the highest TFF / plain-TF ratio of medians that meets it


def _scaling(model: str, clients: int) -> Dict[str, str]:
  return {'model': model, 'clients': str(clients), 'mode': 'default'}


def _overhead(algorithm: str) -> Dict[str, str]:
  return {'algorithm': algorithm, 'mode': 'default'}


_OVERHEAD_RUNS = ('overhead_4_a.csv', 'overhead_4_b.csv', 'overhead_4_quiet.csv')
TARGETS = (
    Target('FEMNIST CNN, 64 clients, FedMeta(MAML)',
           ('scaling_cnn.csv', 'scaling_cnn_64_b.csv', 'scaling_quiet_cnn.csv',
            'scaling_pool_cnn_64.csv'),
           _scaling('femnist_cnn', 64), 1.2),
    # The MLP's runs at the code that keeps every pooled array on the worker (the pool's
    # earlier keys missed most query sets: docs/runs/scaling_256/README.md).
    Target('MLP, 64 clients, FedMeta(MAML)',
           ('scaling_pool_mlp.csv', 'scaling_pool_mlp_64_b.csv'),
           _scaling('mlp', 64), 1.5),
    *[Target(f'FEMNIST CNN, 4 clients, {name}', _OVERHEAD_RUNS, _overhead(name), 1.3)
      for name in ('FedAvg', 'FedAvg(Meta)', 'FedMeta(MAML)', 'FedMeta(FOMAML)',
                   'FedMeta(Meta-SGD)')])


def read_rows(path: str) -> List[Dict[str, str]]:
  with open(path, newline='', encoding='utf-8') as f:
    return list(csv.DictReader(f))


def timing(cell: str) -> Tuple[float, float, float]:
  """(median, min, max) of a `median [min-max]` cell."""
  m = TIMING_RE.fullmatch(cell.strip())
  if m is None:
    raise ValueError(f'not a timing cell: {cell!r}')
  return float(m.group(1)), float(m.group(2)), float(m.group(3))


def _row(rows: Sequence[Mapping[str, str]], conditions: Mapping[str, str], path: str):
  found = [r for r in rows if all(r.get(k) == v for k, v in conditions.items())]
  if len(found) != 1:
    raise ValueError(f'{path}: {len(found)} rows with {dict(conditions)}')
  return found[0]


def targets_markdown(folder: str, targets: Sequence[Target] = TARGETS) -> str:
  """The targets table: per target, each run's ratio (TFF / plain TF wall medians), CPU ratio
  and load average, and whether every run at a load average <= QUIET_LOAD meets it."""
  body = []
  for t in targets:
    rows = [_row(read_rows(os.path.join(folder, f)), t.conditions, f) for f in t.files]
    ratios = [float(r['ratio']) for r in rows]
    quiet = [x for x, r in zip(ratios, rows) if float(r['load average']) <= QUIET_LOAD]
    verdict = ('no run at that load' if not quiet else
               'met' if max(quiet) <= t.target else 'not met')
    body.append([t.label, ', '.join(f'{x:.2f}' for x in ratios),
                 ', '.join(r['CPU ratio'] for r in rows), f'≤ {t.target:.1f}', verdict,
                 ', '.join(r['load average'] for r in rows), ', '.join(t.files)])
  return markdown_table(['setting (default path)', 'ratio, per run', 'CPU ratio, per run',
                         'target', f'met at load ≤ {QUIET_LOAD:g}', 'load average', 'files'],
                        body)


def ratios_markdown(path: str) -> str:
  """`benchmarks/ratios.py`'s CSV as one table: per setting, TFF's and plain TF's median
  seconds per round, their ratio (and CPU ratio), a Table 2 cell's peak memory (program +
  worker, MB) and the load average when the row was measured."""
  body = [[r['part'], r['setting'], timing(r['TFF s/round'])[0], timing(r['plain TF s/round'])[0],
           r['ratio'], r['CPU ratio'] or '-',
           f'{r["peak MB"]} ({r["program peak MB"]} + {r["worker peak MB"]})' if r['peak MB']
           else '-', r['load average']] for r in read_rows(path)]
  return markdown_table(['part', 'setting (default path)', 'TFF s/round', 'plain TF s/round',
                         'ratio', 'CPU ratio', 'peak MB (program + worker)', 'load average'],
                        [[f'{x:.3f}' if isinstance(x, float) else x for x in row] for row in body])


def scaling_curves(rows: Sequence[Mapping[str, str]], model: str
                   ) -> Dict[str, List[Tuple[int, float, float, float]]]:
  """Per figure line, (clients, median, min, max) seconds per round of `model`, by clients.

  Each row times plain TF beside its own TFF calls; the plain-TF line is the
  median of those rows' medians at each number of clients, with the lowest
  minimum and the highest maximum.
  """
  curves: Dict[str, List[Tuple[int, float, float, float]]] = {}
  plain: Dict[int, List[Tuple[float, float, float]]] = {}
  for r in rows:
    if r['model'] != model:
      continue
    plain.setdefault(int(r['clients']), []).append(timing(r['plain TF s/round']))
    curves.setdefault(r['mode'], []).append((int(r['clients']), *timing(r['TFF s/round'])))
  if plain:
    curves['plain TF'] = [(n, float(np.median([t[0] for t in ts])), min(t[1] for t in ts),
                           max(t[2] for t in ts)) for n, ts in plain.items()]
  return {k: sorted(v) for k, v in curves.items()}


def scaling_figure(paths: Sequence[str], out: str) -> None:
  """Seconds per round against clients per round, log-log, one panel per model (in the
  order the files give them): median and min-max of each line in `LINES`."""
  rows = [r for p in paths for r in read_rows(p)]
  models = list(dict.fromkeys(r['model'] for r in rows))
  plt = _pyplot()
  from matplotlib.ticker import ScalarFormatter  # pylint: disable=g-import-not-at-top
  fig, axes = _panels(plt, len(models), width=5.6, height=4.2)
  for ax, model in zip(axes.flat, models):
    curves = scaling_curves(rows, model)
    for mode, label, color, style in LINES:
      points = curves.get(mode)
      if not points:
        continue
      n, med, lo, hi = zip(*points)
      ax.errorbar(n, med, yerr=[[m - a for m, a in zip(med, lo)], [b - m for m, b in zip(med, hi)]],
                  fmt=style, color=color, label=label, capsize=3, markersize=5, linewidth=1.3)
    ax.set_xscale('log', base=2)
    ax.set_yscale('log')
    ax.set_xticks(sorted({c for pts in curves.values() for c, *_ in pts}))
    ax.get_xaxis().set_major_formatter(ScalarFormatter())
    ax.set_xlabel('clients per round')
    ax.set_ylabel('seconds per round (median, min-max)')
    ax.set_title(f'{MODEL_NAMES.get(model, model)}, FedMeta(MAML)')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8, loc='upper left')
  for ax in list(axes.flat)[len(models):]:
    ax.set_visible(False)
  _save(fig, plt, out)


if __name__ == '__main__':   # python -m tff_meta.analysis.speed FOLDER: the targets table
  import sys  # pylint: disable=g-import-not-at-top
  print(targets_markdown(sys.argv[1]))
