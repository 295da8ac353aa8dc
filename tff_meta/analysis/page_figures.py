"""The figures of the results pages, each drawn from the run files its page cites.

A page shows a figure as a block (`analysis.results_page`):

    <!-- block figure: convergence docs/runs/report003_femnist_digits/seed*/* docs/figures/x.png -->

naming its kind (`FIGURES`), the run files it reads (paths from the
repository, globs allowed; a kind that takes several sources separates them
with commas inside one argument) and the PNG it draws. Every PNG the
analysis code writes (`figures._save`) carries its picture data, the series
it plots, in a PNG text chunk (`figures.picture_data`): each panel's title and
axis labels, each line's label and points (errorbars' centres included), each
bar's height. A redraw from the cited runs that gives other
picture data means the figure is stale (tests/test_results_page.py), without
comparing pixels, which differ by matplotlib version.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Sequence

def _paths(spec: str, repo: str) -> List[str]:
  """Comma-separated paths or globs (from `repo`) -> the existing paths, sorted."""
  out = []
  for part in spec.split(','):
    found = sorted(glob.glob(os.path.join(repo, part)))
    if not found:
      raise ValueError(f'{part}: no such file or folder')
    out += found
  return out


# ---- the kinds: (source paths, png) -> draws png ----

def _report_groups(paths: List[str]):
  from tff_meta.analysis import groups as groups_lib  # pylint: disable=g-import-not-at-top
  from tff_meta.core.run_folder import find_run_folders, load_run  # pylint: disable=g-import-not-at-top
  folders, _ = find_run_folders(paths)
  found, _ = groups_lib.group_runs([load_run(f) for f in folders])
  return found


def _convergence(paths: List[str], png: str) -> None:
  """Test accuracy against rounds per setting and method, mean ± std over seeds (FedMeta Fig. 2,
  top), as programs.report draws convergence_rounds.png."""
  from tff_meta.analysis import figures, groups  # pylint: disable=g-import-not-at-top
  found = _report_groups(paths)
  targets = {g.setting: groups.target_for(g.setting, {}) for g in found}
  figures.plot_report_convergence(found, png, 'rounds', targets)


def _fairness(paths: List[str], png: str) -> None:
  """The final per-client accuracy's density per method (FedMeta Fig. 2, bottom row)."""
  from tff_meta.analysis import figures  # pylint: disable=g-import-not-at-top
  figures.plot_fairness(_report_groups(paths), png)


def _cost(paths: List[str], png: str, target: float) -> None:
  """MB and GFLOPs to `target` per method (FedMeta Fig. 3), as programs.report draws cost.png."""
  from tff_meta.analysis import figures, groups  # pylint: disable=g-import-not-at-top
  found = _report_groups(paths)
  figures.plot_cost(found, [groups.group_stats(g, target) for g in found], png)


def _compare(paths: List[str], png: str) -> None:
  """Test accuracy against rounds per method, the mean over seeds at the rounds every seed
  evaluated (programs.compare's convergence.png), from run folders without metrics.csv."""
  from tff_meta.analysis import figures  # pylint: disable=g-import-not-at-top
  from tff_meta.core import run_folder  # pylint: disable=g-import-not-at-top
  by_method: Dict[str, List[List[Dict[str, float]]]] = {}
  for folder in paths:
    if os.path.exists(os.path.join(folder, run_folder.RESULTS_FILE)):
      summary, history, _ = run_folder.read_results(folder)
      by_method.setdefault(summary['method'], []).append(history)
  figures.plot_convergence({m: figures.mean_history(h) for m, h in by_method.items()}, png)


def _fewround(paths: List[str], png: str) -> None:
  """Few-round accuracy against R per setting and method (programs.report's
  accuracy_by_rounds.png)."""
  from tff_meta.analysis import fewround_figures, fewround_report as fr  # pylint: disable=g-import-not-at-top
  entries, _ = fr.group(fr.find_runs(paths))
  rows = fr.entry_rows(entries)
  with tempfile.TemporaryDirectory() as tmp:
    fewround_figures.plot(entries, rows, tmp)
    shutil.move(os.path.join(tmp, 'accuracy_by_rounds.png'), png)


def _scaling(paths: List[str], png: str) -> None:
  """Seconds per round against clients per round (`analysis.speed`)."""
  from tff_meta.analysis import speed  # pylint: disable=g-import-not-at-top
  speed.scaling_figure(paths, png)


def _epsilon(paths: List[str], png: str) -> None:
  """Accuracy against ε per method, mean ± std over seeds, from a privacy_curve.csv."""
  from tff_meta.analysis import figures  # pylint: disable=g-import-not-at-top
  (path,) = paths
  figures.plot_accuracy_by_epsilon(figures.read_epsilon_rows(path), png)


def _table2_curves(paths: List[str], png: str) -> None:
  """FedMeta Fig. 2 from one folder of Table 2 runs (`analysis.table2`): accuracy against
  rounds, and the final accuracy over test writers."""
  from tff_meta.analysis import table2_figures  # pylint: disable=g-import-not-at-top
  (root,) = paths
  table2_figures.plot_curves(root, png)


def _table2_cost(paths: List[str], png: str) -> None:
  """FedMeta Fig. 3 from one folder of Table 2 runs: MB and client GFLOPs to 74% at 20%."""
  from tff_meta.analysis import table2_figures  # pylint: disable=g-import-not-at-top
  (root,) = paths
  table2_figures.plot_cost(root, png)


FIGURES: Dict[str, Callable[[List[str], str], None]] = {
    'convergence': _convergence, 'fairness': _fairness,
    'cost_74': lambda paths, png: _cost(paths, png, 0.74),
    'cost_90': lambda paths, png: _cost(paths, png, 0.90),
    'fewround': _fewround, 'compare': _compare, 'scaling': _scaling, 'epsilon': _epsilon,
    'table2_curves': _table2_curves, 'table2_cost': _table2_cost}


def draw(kind: str, sources: Sequence[str], png: str, repo: str) -> None:
  """Draws `png` (a path from `repo`) of `kind` from `sources` (paths or globs from `repo`)."""
  if kind not in FIGURES:
    raise ValueError(f'unknown figure kind {kind!r} ({", ".join(FIGURES)})')
  paths = [p for s in sources for p in _paths(s, repo)]
  FIGURES[kind](paths, os.path.join(repo, png))


def redrawn(kind: str, sources: Sequence[str], png: str, repo: str) -> Dict[str, Any]:
  """The picture data of `png` drawn afresh into a temporary folder (the file is untouched)."""
  from tff_meta.analysis import figures  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, os.path.basename(png))
    draw(kind, sources, os.path.relpath(out, repo), repo)
    return figures.read_picture_data(out)
