"""Few-round reports' figures and meta-training table: accuracy by R and the meta-training curves.

Park et al., "Few-Round Learning for Federated Learning", Tables 1 and 3 as
plots, and the meta-training curves (query accuracy before each meta-step),
smoothed over SMOOTH_EPISODES and averaged over seeds. `fewround_report.build`
calls these; like the rest of `tff_meta.analysis`, no TensorFlow.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.analysis.figures import _legend, _panels, _pyplot, _save, method_colors
from tff_meta.analysis.figures import method_linestyles
from tff_meta.core.tables import markdown_table
from tff_meta.core.run_folder import METRICS_FILE, read_by_key

# `Entry` and `FewRoundRun` in the annotations are fewround_report's (not imported: a cycle).
SMOOTH_EPISODES = 50            # rolling window of the meta-training curves
META_WINDOWS = 5                # parts of a run in the meta-training table


def read_meta_curve(run: FewRoundRun, method: str, column: str = 'query_accuracy'
                    ) -> Optional[np.ndarray]:
  """Per-episode `column` of `method`'s meta-training in `run` (metrics.csv; the last row of
  an episode wins), or None when it has none."""
  by_episode = read_by_key(os.path.join(run.path, method, METRICS_FILE), 'episode', column)
  if not by_episode:
    return None
  n = max(by_episode)
  return np.array([by_episode.get(i, np.nan) for i in range(1, n + 1)])


def window_means(curve: np.ndarray, windows: int) -> List[Tuple[int, int, float]]:
  """(first, last episode, mean) of `curve` (episode 1 first) in `windows` equal parts."""
  edges = np.linspace(0, len(curve), windows + 1).round().astype(int)
  return [(int(a) + 1, int(b), float(np.nanmean(curve[a:b])))
          for a, b in zip(edges[:-1], edges[1:]) if b > a]


def meta_training_markdown(entries: Sequence[Entry], windows: int = META_WINDOWS) -> Optional[str]:
  """Per seed of each meta-trained method: its meta-train query accuracy and Eq. 4's support
  loss at the start of each round (round 0: at phi itself) in `windows` equal parts of the run.

  A support loss near ln(n_way) at phi (1.61 for 5 ways) is a near-uniform prediction: the
  embedding's distances have shrunk, and the local steps start from there (docs/RESULTS.md).
  """
  lines = []
  for e in entries:
    for run, row in e.members:
      query = read_meta_curve(run, row['method'])
      if query is None:
        continue
      rounds = int(run.config.get('rounds', 0))
      columns = [('meta-train query accuracy', query)] + [
          (f'support loss at round {r}' + (' (at φ)' if r == 0 else ''),
           read_meta_curve(run, row['method'], f'support_loss_round{r}')) for r in range(rounds)]
      columns = [(name, c) for name, c in columns if c is not None]
      parts = window_means(query, windows)
      header = ['episodes', *[name for name, _ in columns]]
      body = [[f'{a}-{b}', *[f'{window_means(c, windows)[i][2]:.3f}' for _, c in columns]]
              for i, (a, b, _) in enumerate(parts)]
      lines += [f'### {e.method}, seed {run.seed} ({e.setting.label})', '',
                markdown_table(header, body), '']
  if not lines:
    return None
  return '\n'.join(['## Meta-training, per seed', '',
                    f'Means over {windows} equal parts of each run\'s episodes (metrics.csv): '
                    'the meta-train query accuracy before the meta-step, and Eq. 4\'s support '
                    'loss at the start of each round (round 0 is φ itself; ln 5 = 1.61 is a '
                    'uniform 5-way prediction).', '', *lines])


def _rolling(x: np.ndarray, window: int) -> np.ndarray:
  out = np.full(len(x), np.nan)
  for i in range(len(x)):
    part = x[max(0, i - window + 1):i + 1]
    if np.isfinite(part).any():
      out[i] = np.nanmean(part)
  return out


def _seeds(n: int) -> str:
  return f'{n} seed' + ('' if n == 1 else 's')


def plot(entries: Sequence[Entry], rows: Sequence[Dict[str, Any]], output_dir: str) -> List[str]:
  """accuracy_by_rounds.png and, when any method logged meta-training, meta_training.png."""
  plt = _pyplot()
  settings = sorted({e.setting for e in entries})
  written = []
  most = max(sum(e.setting == s for e in entries) for s in settings)
  methods = sorted({e.method for e in entries})   # one color per method across the panels
  colors, styles = method_colors(methods), method_linestyles(methods)
  fig, axes = _panels(plt, len(settings), most)
  for ax, setting in zip(axes.flat, settings):
    for e in (e for e in entries if e.setting == setting):
      rs = [r for r in rows if r['setting'] == setting.label and r['method'] == e.method]
      ax.errorbar([r['R'] for r in rs], [r['accuracy'] for r in rs],
                  yerr=[r['std_over_seeds'] for r in rs], marker='o', capsize=3,
                  color=colors[e.method], linestyle=styles[e.method],
                  label=f'{e.method} ({_seeds(len(e.members))})')
    ax.set(title=setting.label, xlabel='R (rounds of FL at deployment)',
           ylabel='test accuracy % (mean ± std over seeds)',
           xticks=sorted({r['R'] for r in rows if r['setting'] == setting.label}))
    ax.title.set_fontsize(9)
    _legend(ax, most)
  path = os.path.join(output_dir, 'accuracy_by_rounds.png')
  _save(fig, plt, path)
  written.append(path)

  curves = {}
  for e in entries:
    cs = [c for c in (read_meta_curve(run, row['method']) for run, row in e.members)
          if c is not None]
    if cs:
      n = min(len(c) for c in cs)
      curves[(e.setting, e.method)] = (np.nanmean([_rolling(c[:n], SMOOTH_EPISODES) for c in cs],
                                                  axis=0), len(cs))
  if curves:
    csettings = sorted({s for s, _ in curves})
    fig, axes = _panels(plt, len(csettings), most)
    for ax, setting in zip(axes.flat, csettings):
      for (s, method), (curve, n) in curves.items():
        if s == setting:
          ax.plot(np.arange(1, len(curve) + 1), 100 * curve, color=colors[method],
                  linestyle=styles[method], label=f'{method} ({_seeds(n)})')
      ax.set(title=setting.label, xlabel='meta-training episode',
             ylabel=f'meta-train query accuracy % ({SMOOTH_EPISODES}-episode mean)')
      ax.title.set_fontsize(9)
      _legend(ax, most)
    path = os.path.join(output_dir, 'meta_training.png')
    _save(fig, plt, path)
    written.append(path)
  return written
