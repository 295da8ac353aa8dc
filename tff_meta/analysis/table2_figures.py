"""FedMeta Fig. 2 and Fig. 3 drawn from the Table 2 runs of one folder (`analysis.table2`).

FedMeta (Chen et al. 2018, "Federated Meta-Learning with Fast Convergence and Efficient
Communication", arXiv:1802.07876):

- `plot_curves` (Fig. 2): one row per support column; test and validation accuracy against
  rounds (eval.csv), mean over seeds at the rounds every seed evaluated with a ± sample std
  band, per trained method; and the kernel density of the final accuracy over test writers
  per method (the scores' per-writer accuracies, all seeds pooled: the paper's fairness
  view), FedAvg(Meta) included;
- `plot_cost` (Fig. 3): bars of the MB (down + up) and client GFLOPs to the first evaluation
  at 74% test accuracy, per method at 20% support, mean ± std over the seeds that reach it;
  "not reached" where none does.

Each PNG stores its plotted series (`figures.picture_data`), so a redraw can be compared.
"""

from __future__ import annotations

import os
from typing import Dict, List

import numpy as np

from tff_meta.analysis import table2
from tff_meta.analysis.figures import _legend, _pyplot, _save, method_colors
from tff_meta.analysis.tables import seed_std
from tff_meta.core import run_folder
from tff_meta.evaluation import fairness

CURVES = (('test_accuracy', 'test accuracy (%)'),
          ('validation_accuracy', 'validation accuracy (%)'))


def mean_curve(folders: List[str], column: str) -> Dict[str, np.ndarray]:
  """`column` of eval.csv (%) at the rounds every folder evaluated: mean and sample std."""
  curves = [run_folder.read_by_key(os.path.join(f, run_folder.EVAL_FILE), 'round', column)
            for f in folders]
  common = sorted(set.intersection(*[set(c) for c in curves])) if curves else []
  acc = np.array([[100 * c[k] for k in common] for c in curves]).reshape(len(curves),
                                                                          len(common))
  std = np.array([seed_std(acc[:, j]) for j in range(len(common))])
  return dict(rounds=np.asarray(common, np.float64), mean=acc.mean(0) if len(curves) else acc,
              std=std)


def _colors() -> Dict[str, object]:
  return method_colors([label for label, _, _, _ in table2.ROWS])


def plot_curves(root: str, path: str) -> None:
  """Fig. 2 from the runs under `root` (`table2.read`), one row of panels per support."""
  t = table2.read(root)
  plt = _pyplot()
  colors = _colors()
  fig, axes = plt.subplots(len(table2.SUPPORTS), 3, squeeze=False,
                           figsize=(6.2 * 3, 4.3 * len(table2.SUPPORTS)))
  for i, s in enumerate(table2.SUPPORTS):
    for j, (column, ylabel) in enumerate(CURVES):
      ax = axes[i][j]
      for label, method, _, supports in table2.ROWS:
        folders = list(t.trained_by(s, label).values())
        if label == table2.REFERENCE or s not in supports or not folders:
          continue   # FedAvg(Meta) fine-tunes at test time only: no curve of its own
        c = mean_curve(folders, column)
        trained = table2.TRAINED_AT.get(method, s)
        ax.plot(c['rounds'], c['mean'], color=colors[label],
                label=f'{label} ({len(folders)} seed{"s" if len(folders) > 1 else ""}'
                f'{f"; its {trained}% run" if trained != s else ""})')
        if len(folders) > 1:
          ax.fill_between(c['rounds'], c['mean'] - c['std'], c['mean'] + c['std'],
                          color=colors[label], alpha=0.15, linewidth=0)
      ax.set_title(f'{s}% support: {ylabel.split(" (")[0]}')
      ax.set_xlabel('communication round')
      ax.set_ylabel(ylabel)
      ax.grid(alpha=0.3)
      if ax.get_lines():
        _legend(ax, len(ax.get_lines()), loc='lower right')
    ax = axes[i][2]
    grid = np.linspace(0.0, 100.0, 501)
    for label, _, _, _ in table2.ROWS:
      scores = list(t.scores.get((s, label), {}).values())
      if not scores:
        continue
      pooled = 100 * np.concatenate([x.client_accuracies for x in scores])
      d = fairness.kde(pooled, grid=grid, min_bandwidth=1.0, bounds=(0.0, 100.0))
      ax.plot(d.grid, d.density, color=colors[label], label=f'{label}: mean '
              f'{np.mean(pooled):.1f} ({pooled.size} writers of {len(scores)} seeds)')
    ax.set_title(f'{s}% support: final accuracy over test writers')
    ax.set_xlabel('final test accuracy of a writer (%)')
    ax.set_ylabel('density')
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.get_lines():
      _legend(ax, len(ax.get_lines()), loc='upper left')
  fig.suptitle('FedMeta Fig. 2 on FEMNIST: mean over seeds (band: ± sample std; FedAvg(Meta) '
               'fine-tunes at test time only, so has no curve); right: kernel density of the '
               'final accuracy over test writers, seeds pooled', fontsize=11)
  _save(fig, plt, path)


def plot_cost(root: str, path: str) -> None:
  """Fig. 3 from the runs under `root`: MB and client GFLOPs to 74% at 20% support."""
  rows = table2.cost(root)
  plt = _pyplot()
  colors = _colors()
  fig, axes = plt.subplots(1, 2, squeeze=False, figsize=(11, 4.2))
  for ax, (key, scale, ylabel) in zip(axes[0], (('bytes', 1e6, 'MB down + up'),
                                                ('flops', 1e9, 'client GFLOPs'))):
    reached = [[v[key] / scale for v in r['seeds'].values() if v is not None] for r in rows]
    top = max([np.mean(v) + seed_std(v) for v in reached if v] + [1.0])
    for x, (r, values) in enumerate(zip(rows, reached)):
      if values:
        ax.bar(x, np.mean(values), color=colors[r['method']],
               yerr=seed_std(values) if len(values) > 1 else None, capsize=4)
        ax.text(x, np.mean(values), f"{np.mean(values):,.0f}\n{len(values)} of "
                f"{len(r['seeds'])} seeds", ha='center', va='bottom', fontsize=8)
      else:   # a bar of no height: the picture data record None
        ax.bar(x, np.nan, color=colors[r['method']])
        ax.text(x, 0.02 * top, 'not reached' if r['seeds'] else 'no run', ha='center',
                va='bottom', fontsize=8, color='dimgrey', rotation=90)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r['method'] for r in rows], rotation=20, ha='right', fontsize=8)
    ax.set_ylabel(f'{ylabel} to {table2.TARGET_ACCURACY:.0%} test accuracy')
    ax.set_ylim(0, 1.25 * top)
    ax.grid(axis='y', alpha=0.3)
    ax.set_title(f'20% support: {ylabel} to {table2.TARGET_ACCURACY:.0%}')
  fig.suptitle('FedMeta Fig. 3 on FEMNIST: cost to the first evaluation at 74% (mean ± '
               'sample std over the seeds that reach it)', fontsize=10)
  _save(fig, plt, path)
