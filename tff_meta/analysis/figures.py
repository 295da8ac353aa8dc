"""Figures of a report: FedMeta Fig. 2 (convergence and fairness) and Fig. 3 (cost).

- `plot_report_convergence`: test accuracy against rounds, or against the
  cumulative MB sent, one panel per setting, mean over seeds with a ± std
  band (FedMeta Fig. 2, top rows);
- `plot_fairness`: the kernel density of the final per-client test accuracy,
  the clients of all seeds pooled (Fig. 2, bottom row);
- `plot_cost`: bars of the MB and client GFLOPs to reach the target accuracy
  (Fig. 3);
- `plot_convergence`: the single-panel curve of `programs.compare`;
- `plot_accuracy_by_epsilon`: accuracy against the privacy budget ε
  (`research.privacy_curve`; `read_epsilon_rows` reads its CSV).

matplotlib runs headless (Agg); PNGs are written atomically, each with its picture
data (`picture_data`: the series it plots) in a text chunk, so a page's figure can be
checked against a redraw (`analysis.page_figures`) without comparing pixels.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from tff_meta.analysis.groups import Group, method_key, pooled_client_accuracies
from tff_meta.core.tables import num, pct_label
from tff_meta.evaluation import fairness
from tff_meta.core.files import save_figure
from tff_meta.core.run_folder import Run, Setting


def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


MAX_LEGEND_INSIDE = 6   # more lines than this: the legend goes below its panel


def _panels(plt, n: int, entries: int = 0, width: float = 6.2, height: float = 4.3):
  """A grid of n panels (3 per row); taller when `entries` legend lines go below each panel."""
  ncols = min(n, 3)
  nrows = math.ceil(n / ncols)
  if entries > MAX_LEGEND_INSIDE:
    height += 0.6 + 0.19 * entries
  fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
  return fig, axes


def _legend(ax, entries: int, loc: str = 'best') -> None:
  if entries > MAX_LEGEND_INSIDE:
    ax.legend(fontsize=7, loc='upper center', bbox_to_anchor=(0.5, -0.14), frameon=False)
  else:
    ax.legend(fontsize=8, loc=loc)


def _entries(groups: Sequence[Group]) -> int:
  """The most methods in one setting."""
  counts: Dict[Setting, int] = {}
  for g in groups:
    counts[g.setting] = counts.get(g.setting, 0) + 1
  return max(counts.values(), default=0)


def method_colors(methods: Sequence[str]) -> Dict[str, Any]:
  """One tab10 color per method name, in first-seen order (colors repeat after 10), so a
  method has the same color in every panel of a figure."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  cmap = matplotlib.colormaps['tab10']
  return {m: cmap(i % 10) for i, m in enumerate(dict.fromkeys(methods))}


def method_linestyles(methods: Sequence[str]) -> Dict[str, str]:
  """Solid for the first 10 method names, then dashed, ...: `method_colors` repeats after 10."""
  styles = ('-', '--', '-.', ':')
  return {m: styles[(i // 10) % len(styles)] for i, m in enumerate(dict.fromkeys(methods))}


def _method_order(groups: Sequence[Group]) -> List[str]:
  return [g.method for g in sorted(groups, key=lambda g: (method_key(g.algorithm), g.method))]


def _colors(groups: Sequence[Group]) -> Dict[str, Any]:
  return method_colors(_method_order(groups))


def _linestyles(groups: Sequence[Group]) -> Dict[str, str]:
  return method_linestyles(_method_order(groups))


KEY = 'tff_meta picture data'   # the PNG text chunk's keyword


def _round(values: Any) -> List[float]:
  """Floats to 6 significant digits (a redraw's last bits may differ), nan kept as None."""
  out = []
  for v in np.asarray(values, np.float64).ravel():
    out.append(None if not math.isfinite(v) else float(f'{v:.6g}'))
  return out


def picture_data(fig) -> Dict[str, Any]:
  """The series a matplotlib figure plots: per visible panel, its title, axis labels, lines
  (label, x, y) and bars (heights), in drawing order."""
  panels = []
  for ax in fig.axes:
    if not ax.get_visible():
      continue
    lines = [{'label': str(line.get_label()), 'x': _round(line.get_xdata()),
              'y': _round(line.get_ydata())} for line in ax.get_lines()]
    bars = _round([p.get_height() for p in ax.patches if hasattr(p, 'get_height')])
    panels.append({'title': ax.get_title(), 'xlabel': ax.get_xlabel(),
                   'ylabel': ax.get_ylabel(), 'lines': lines, 'bars': bars})
  return {'panels': panels}


def save_metadata(fig) -> Dict[str, str]:
  """savefig's `metadata` for a PNG: the picture data as one text chunk."""
  return {KEY: json.dumps(picture_data(fig), sort_keys=True)}


def read_picture_data(png: str) -> Dict[str, Any]:
  """The picture data stored in `png`; {} when it has none (drawn before they were stored)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  with Image.open(png) as image:
    text = getattr(image, 'text', {}) or image.info
    return json.loads(text[KEY]) if KEY in text else {}


def _save(fig, plt, path: str) -> None:
  """Writes `fig` atomically; a PNG carries its picture data (`picture_data`)."""
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  png = path.lower().endswith('.png')
  save_figure(fig, path, dpi=120, **({'metadata': save_metadata(fig)} if png else {}))
  plt.close(fig)


def mean_curve(runs: Sequence[Run]) -> Dict[str, np.ndarray]:
  """Test accuracy (%) and cumulative MB at the evaluation rounds all runs share: mean, std."""
  common = sorted(set.intersection(*[{int(h['round']) for h in r.history} for r in runs]))
  acc = np.array([[100 * {int(h['round']): h['test_accuracy'] for h in r.history}[k]
                   for k in common] for r in runs]).reshape(len(runs), len(common))
  mb = np.array([[r.cost_at(k)[0] / 1e6 for k in common] for r in runs]).reshape(acc.shape)
  std = acc.std(0, ddof=1) if len(runs) > 1 else np.zeros(len(common))   # tables.seed_std
  return dict(rounds=np.array(common), acc=acc.mean(0), acc_std=std, mb=mb.mean(0))


def plot_report_convergence(groups: Sequence[Group], path: str, x: str,
                            targets: Mapping[Setting, Optional[float]]) -> None:
  """Test accuracy against rounds (x='rounds') or cumulative MB (x='mb'), one panel per setting."""
  plt = _pyplot()
  settings = sorted({g.setting for g in groups})
  legend_lines = _entries(groups) + 1   # + the target line
  fig, axes = _panels(plt, len(settings), legend_lines)
  colors, styles = _colors(groups), _linestyles(groups)
  for i, setting in enumerate(settings):
    ax = axes.flat[i]
    for g in (g for g in groups if g.setting == setting):
      c = mean_curve(g.runs)
      if not len(c['rounds']):
        continue
      xs = c['rounds'] if x == 'rounds' else c['mb']
      ax.plot(xs, c['acc'], marker='o', markersize=3, color=colors[g.method],
              linestyle=styles[g.method],
              label=f'{g.method} ({len(g.runs)} run{"s" if len(g.runs) > 1 else ""})')
      if len(g.runs) > 1:
        ax.fill_between(xs, c['acc'] - c['acc_std'], c['acc'] + c['acc_std'],
                        color=colors[g.method], alpha=0.15, linewidth=0)
    target = targets.get(setting)
    if target is not None:
      ax.axhline(100 * target, color='grey', linestyle='--', linewidth=1,
                 label=f'target {100 * target:g}%')
    ax.set_title(setting.label)
    ax.set_xlabel('communication round' if x == 'rounds'
                  else 'cumulative MB sent (down + up, all clients)')
    if x == 'rounds':
      ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel('test accuracy on query sets (%)')
    ax.grid(alpha=0.3)
    _legend(ax, legend_lines)
  for ax in axes.flat[len(settings):]:
    ax.set_visible(False)
  fig.suptitle('Test accuracy, mean over runs (band: ± std)', fontsize=11)
  _save(fig, plt, path)


def plot_fairness(groups: Sequence[Group], path: str) -> None:
  """Kernel density of the final per-client test accuracy per method (FedMeta Fig. 2, bottom)."""
  plt = _pyplot()
  settings = sorted({g.setting for g in groups})
  fig, axes = _panels(plt, len(settings), _entries(groups))
  colors, styles = _colors(groups), _linestyles(groups)
  for i, setting in enumerate(settings):
    ax = axes.flat[i]
    members = [g for g in groups if g.setting == setting]
    pooled = [100 * pooled_client_accuracies(g) for g in members]
    grid = np.linspace(0.0, 100.0, 501)
    for g, p in zip(members, pooled):
      d = fairness.kde(p, grid=grid, min_bandwidth=1.0, bounds=(0.0, 100.0))
      mean = float(np.mean(p))
      ax.plot(d.grid, d.density, color=colors[g.method], linestyle=styles[g.method],
              label=f'{g.method}: mean {mean:.1f}, std {np.std(p):.1f} ({p.size} clients)')
      ax.fill_between(d.grid, d.density, color=colors[g.method], alpha=0.12, linewidth=0)
      ax.axvline(mean, color=colors[g.method], linestyle=':', linewidth=1)
    ax.set_title(setting.label)
    ax.set_xlabel('final test accuracy of a client (%)')
    ax.set_ylabel('density')
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    low = min(float(p.min()) for p in pooled)
    ax.set_xlim(max(0.0, 10 * math.floor((low - 10) / 10)), 100)
    _legend(ax, _entries(groups), loc='upper left')
  for ax in axes.flat[len(settings):]:
    ax.set_visible(False)
  fig.suptitle('Final per-client test accuracy: kernel density\n'
               '(clients of all runs pooled; reflected at 0 and 100%; dotted: mean)', fontsize=10)
  _save(fig, plt, path)


def plot_cost(groups: Sequence[Group], rows: Sequence[Dict[str, Any]], path: str) -> bool:
  """Bars of MB (and GFLOPs) to the target per method, a column per setting (FedMeta Fig. 3).

  Returns False, writing nothing, when no method reached its target anywhere.
  """
  settings = [s for s in sorted({g.setting for g in groups})
              if any(r.get('reached') for g, r in zip(groups, rows) if g.setting == s)]
  if not settings:
    return False
  any_flops = any('gflops_to_target' in r for r in rows)
  measures = [('mb_to_target', 'MB sent to reach the target (down + up)')]
  if any_flops:
    measures.append(('gflops_to_target', 'client GFLOPs to reach the target'))
  plt = _pyplot()
  fig, axes = plt.subplots(len(measures), len(settings), squeeze=False,
                           figsize=(max(5.5, 1.1 * _entries(groups)) * len(settings),
                                    3.9 * len(measures)))
  colors = _colors(groups)
  for j, setting in enumerate(settings):
    members = [(g, r) for g, r in zip(groups, rows) if g.setting == setting]
    for i, (key, ylabel) in enumerate(measures):
      ax = axes[i][j]
      xs = np.arange(len(members))
      top = max([r.get(key, 0) + r.get(key + '_std', 0) for _, r in members] + [1e-12])
      for x, (g, r) in zip(xs, members):
        if key in r:
          ax.bar(x, r[key], color=colors[g.method],
                 yerr=r[key + '_std'] if r['reached'] > 1 else None, capsize=4)
          note = '' if r['reached'] == r['runs'] else f"{r['reached']}/{r['runs']} runs"
          err = r[key + '_std'] if r['reached'] > 1 else 0.0
          ax.text(x, r[key] + err, f'{num(r[key])}\n{note}'.rstrip(), ha='center',
                  va='bottom', fontsize=8)
        else:
          why = 'not reached' if not r.get('reached') else 'no FLOPs\nrecorded'
          ax.text(x, 0.02 * top, why, ha='center', va='bottom', fontsize=8, color='dimgrey',
                  rotation=90)
      ax.set_xticks(xs)
      ax.set_xticklabels([g.method for g, _ in members], rotation=25, ha='right', fontsize=8)
      ax.set_ylabel(ylabel, fontsize=9)
      ax.set_ylim(0, top * 1.25)
      ax.grid(axis='y', alpha=0.3)
      if i == 0:
        ax.set_title(f"{setting.label}: to {pct_label(members[0][1]['target'])}")
  fig.suptitle('Cost to reach the target test accuracy\n(mean ± std over the runs that reach it)',
               fontsize=10)
  _save(fig, plt, path)
  return True


def mean_history(histories: Sequence[Sequence[Mapping[str, float]]]) -> List[Dict[str, float]]:
  """Test accuracy averaged over runs (seeds) at the rounds every run evaluated."""
  rounds = sorted(set.intersection(*[{h['round'] for h in hist} for hist in histories]))
  by_round = [{h['round']: h for h in hist} for hist in histories]
  return [{'round': r, 'test_accuracy': float(np.mean([b[r]['test_accuracy'] for b in by_round]))}
          for r in rounds]


def plot_convergence(histories: Dict[str, List[Dict[str, float]]], path: str,
                     title: str = '') -> None:
  """Test accuracy (all query points) against rounds, one line per method."""
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for method, history in histories.items():
    rounds = [h['round'] for h in history if 'test_accuracy' in h]
    acc = [100 * h['test_accuracy'] for h in history if 'test_accuracy' in h]
    ax.plot(rounds, acc, marker='o', markersize=3, label=method)
  ax.set_xlabel('communication round')
  ax.set_ylabel('test accuracy on query sets (%)')
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  _save(fig, plt, path)


def read_epsilon_rows(path: str) -> List[Dict[str, Any]]:
  """A privacy_curve.csv (one row per method, ε and seed) -> per (method, target ε), in the
  file's order: accuracy mean and sample std over seeds (`tables.seed_std`)."""
  import csv  # pylint: disable=g-import-not-at-top
  from tff_meta.analysis.tables import seed_std  # pylint: disable=g-import-not-at-top
  cells: Dict[Any, List[float]] = {}
  with open(path, newline='', encoding='utf-8') as f:
    for row in csv.DictReader(f):
      cells.setdefault((row['method'], float(row['target_epsilon'])), []).append(
          float(row['accuracy']))
  return [dict(method=m, target_epsilon=t, accuracy=float(np.mean(a)), accuracy_std=seed_std(a))
          for (m, t), a in cells.items()]


def plot_accuracy_by_epsilon(summary: Sequence[Mapping[str, Any]], path: str,
                             title: str = '') -> None:
  """Accuracy ± std against the target ε (log axis), one line per method; ε = ∞ is drawn at
  the right edge."""
  plt = _pyplot()
  finite = sorted({s['target_epsilon'] for s in summary if not math.isinf(s['target_epsilon'])})
  inf_x = (finite[-1] * 4) if finite else 1.0
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  for method in dict.fromkeys(s['method'] for s in summary):
    points = sorted((inf_x if math.isinf(s['target_epsilon']) else s['target_epsilon'],
                     s['accuracy'], s['accuracy_std']) for s in summary if s['method'] == method)
    x, y, err = (np.array(v) for v in zip(*points))
    ax.errorbar(x, y, yerr=err, marker='o', capsize=3, label=method)
  ax.set_xscale('log')
  ax.set_xticks(finite + [inf_x])
  ax.set_xticklabels([f'{t:g}' for t in finite] + ['∞'])
  ax.minorticks_off()
  ax.set_xlabel('ε (user level, at the same δ)')
  ax.set_ylabel('test accuracy (%), mean ± std over seeds')
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  _save(fig, plt, path)
