"""The sources of docs/RESULTS.md's numbers: each kind of run files, read by the reports' own
code, and how a marked number is computed from them (`analysis.results_page` describes the
markers; `KINDS` maps a source kind to its reader).

A reader takes the source's folders (or file) and returns a function of (group, metric) ->
the text of the number. Besides the reports' statistics it gives each group's code versions
(`code_versions`, from provenance.csv) and round times (`hours`, `round_seconds=a-b`, from
metrics.csv), so that a page's *Code* cells and runtime claims are read from the runs too.
"""

from __future__ import annotations

import csv
import os
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from tff_meta.analysis import tables

RECONSTRUCTED = 'reconstructed'
RESUMED = 'resumed under a newer commit'


class PageError(ValueError):
  """A marker that names no source, group or metric."""


def spread(values: Sequence[float], digits: int = 2) -> str:
  """'mean ± sample std' (ddof = 1) over seeds; the value alone for one seed."""
  arr = np.asarray(values, np.float64)
  if len(arr) == 1:
    return f'{arr[0]:.{digits}f}'
  return f'{arr.mean():.{digits}f} ± {tables.seed_std(arr):.{digits}f}'


def _format(values: Dict[int, float], metric: str, digits: int) -> str:
  if metric == 'sd':
    return spread(list(values.values()), digits)
  if metric == 'mean':
    return f'{np.mean(list(values.values())):.{digits}f}'
  if metric == 'n':
    return str(len(values))
  if metric == 'seeds':
    return ', '.join(str(s) for s in sorted(values))
  raise PageError(f'unknown metric {metric!r} (sd, mean, n, seeds or vs=<method>)')


def reconstructed(folder: str) -> bool:
  """Whether `folder`'s provenance.csv was written after the run (a row's `note` column,
  which `provenance.read` does not return, starts with "reconstructed")."""
  from tff_meta.core.run_folder import PROVENANCE_FILE  # pylint: disable=g-import-not-at-top
  try:
    with open(os.path.join(folder, PROVENANCE_FILE), newline='', encoding='utf-8') as f:
      return any((row.get('note') or '').startswith(RECONSTRUCTED) for row in csv.DictReader(f))
  except OSError:
    return False


def short_version(version: str) -> str:
  """`version` (12 hex digits, maybe `+dirty`) cut to 7 digits, keeping the `+dirty` mark."""
  commit, dirty, _ = version.partition('+dirty')
  return commit[:7] + dirty


def code_versions(folders: Sequence[str]) -> str:
  """The code versions that wrote `folders` (provenance.csv), oldest first, 7 digits each
  (a `+dirty` mark, a checkout with uncommitted changes, is kept after the digits); then "(reconstructed)" when a folder's provenance was written after the run (its `note`
  says so; "k of n folders" when not all), "(resumed under a newer commit)" when a folder
  names several versions."""
  from tff_meta.core import provenance  # pylint: disable=g-import-not-at-top
  seen: Dict[str, None] = {}
  rebuilt = resumed = 0
  for folder in folders:
    rows = provenance.read(folder) or [{'code_version': 'not recorded'}]
    mine = {}
    for row in rows:
      v = row['code_version']
      mine.setdefault(v if v in (provenance.UNKNOWN, 'not recorded') else short_version(v), None)
    seen.update(mine)
    rebuilt += reconstructed(folder)
    resumed += len(mine) > 1   # a reconstructed folder may have been resumed as well
  notes = []
  if rebuilt:
    notes.append(RECONSTRUCTED + ('' if rebuilt == len(folders) else
                                  f': {rebuilt} of {len(folders)} folders'))
  if resumed:
    notes.append(RESUMED + ('' if resumed == len(folders) else
                            f': {resumed} of {len(folders)} folders'))
  return ', '.join(seen) + ''.join(f' ({n})' for n in notes)


def _seeds(group: List[str]) -> Tuple[List[str], Callable[[int], bool]]:
  """A group's trailing `seeds=a-b` part, as a filter on seeds."""
  if group and group[-1].startswith('seeds='):
    lo, _, hi = group[-1][6:].partition('-')
    return group[:-1], lambda s: int(lo) <= s <= int(hi or lo)
  return group, lambda s: True


def _pm(diff: float, ci: float, digits: int) -> str:
  """'+d ± ci'; the difference alone where one seed leaves no interval."""
  text = f'{diff:+.{digits}f}' + (f' ± {ci:.{digits}f}' if np.isfinite(ci) else ' (one seed)')
  return text.replace('-', '−')


# ---- the sources: (roots) -> function (group, metric) -> text ----

def _report(roots: List[str]) -> Callable[[List[str], str], str]:
  from tff_meta.analysis import groups as groups_lib  # pylint: disable=g-import-not-at-top
  from tff_meta.core.run_folder import find_run_folders, load_run  # pylint: disable=g-import-not-at-top
  folders, _ = find_run_folders(roots)
  groups, _ = groups_lib.group_runs([load_run(f) for f in folders])
  by_key = {(g.setting.label, g.method): g for g in groups}

  def value(group: List[str], metric: str) -> str:
    group, keep = _seeds(group)
    if group[-1:] == ['*'] and metric == 'hours':
      runs = [r for (s, _), g in by_key.items() if s == group[0] for r in g.runs if keep(r.seed)]
      if not runs:
        raise PageError(f'no runs of setting {group[0]!r}')
      return _hours([sum(_round_seconds(r.path).values()) for r in runs])
    g = by_key.get(tuple(group))
    if g is None:
      raise PageError(f'no group {group}; there are {sorted(by_key)}')
    runs = [r for r in g.runs if keep(r.seed)]
    if metric == 'code':
      return code_versions([r.path for r in runs])
    if metric == 'hours':
      return _hours([sum(_round_seconds(r.path).values()) for r in runs])
    key, _, what = metric.rpartition(' ')
    if key.startswith(('rounds_to=', 'mb_to=', 'gflops_to=')):
      return _format(_cost(runs, key), what, 0)
    if key.startswith('round_seconds='):   # the median round time over rounds a-b
      lo, _, hi = key.partition('=')[2].partition('-')
      return _format({r.seed: float(np.median([s for k, s in _round_seconds(r.path).items()
                                               if int(lo) <= k <= int(hi)])) for r in runs},
                     what, 2)
    return _format({r.seed: float(r.summary[key or 'accuracy']) for r in runs}, what, 2)
  return value


def _round_seconds(folder: str) -> Dict[int, float]:
  """round -> `round_seconds` of a run folder's metrics.csv (rounds that record one)."""
  with open(os.path.join(folder, 'metrics.csv'), newline='', encoding='utf-8') as f:
    return {int(row['round']): float(row['round_seconds']) for row in csv.DictReader(f)
            if row.get('round_seconds')}


def _hours(seconds: Sequence[float]) -> str:
  """'a-b hours (n runs[; k record none])': the range of the runs' summed round times; one
  run's alone."""
  timed = [s / 3600 for s in seconds if s > 0]
  if len(seconds) == 1:
    return f'{timed[0]:.2f} hours' if timed else 'no round times'
  text = (f'{min(timed):.2f}-{max(timed):.2f} hours' if timed else 'no round times') + \
      f' ({len(seconds)} runs'
  zero = len(seconds) - len(timed)
  return text + (f'; {zero} record none)' if zero else ')')


def _runs(roots: List[str]) -> Callable[[List[str], str], str]:
  from tff_meta.core import run_folder  # pylint: disable=g-import-not-at-top
  folders, _ = run_folder.find_run_folders(roots)
  by_method: Dict[str, Dict[int, Tuple[str, Dict[str, Any]]]] = {}
  for folder in folders:
    summary, _, _ = run_folder.read_results(folder)
    seed = int(run_folder.read_config(folder)['seed'])
    by_method.setdefault(summary['method'], {})[seed] = (folder, summary)

  def value(group: List[str], metric: str) -> str:
    (method,) = group
    if method not in by_method:
      raise PageError(f'no method {method!r}; there are {sorted(by_method)}')
    runs = by_method[method]
    if metric == 'code':
      return code_versions([folder for folder, _ in runs.values()])
    key, _, what = metric.rpartition(' ')
    return _format({s: float(summary[key or 'accuracy']) for s, (_, summary) in runs.items()},
                   what, 2)
  return value


def _cost(runs: Sequence[Any], key: str) -> Dict[int, float]:
  """Per seed, the rounds / MB / client GFLOPs to the first evaluation reaching the target
  (`rounds_to=0.74`), as programs.report counts them; a run that never reaches it is left out."""
  what, _, target = key.partition('=')
  out = {}
  for r in runs:
    k = r.first_round_reaching(float(target))
    if k is not None:
      mb, flops = r.cost_at(k)
      out[r.seed] = {'rounds_to': k, 'mb_to': mb / 1e6,
                     'gflops_to': float('nan') if flops is None else flops / 1e9}[what]
  if not out:
    raise PageError(f'no run reaches {target}')
  return out


def _rescored(roots: List[str]) -> Callable[[List[str], str], str]:
  from tff_meta.analysis import rescored  # pylint: disable=g-import-not-at-top
  scores, _ = rescored.read(','.join(roots))

  def value(group: List[str], metric: str) -> str:
    (method,) = group
    mine = {s.seed: 100 * s.accuracy for s in scores if s.method == method}
    if not mine:
      raise PageError(f'no method {method!r} in {roots}')
    if metric.startswith('vs='):
      row = next(r for r in rescored.summarize(scores, metric[3:]) if r['method'] == method)
      return _pm(row['vs_diff'], row['vs_ci95'], 2)
    return _format(mine, metric, 2)
  return value


def _one(labels: Sequence[str], part: str) -> str:
  found = [s for s in labels if part in s]
  if len(found) != 1:
    raise PageError(f'setting {part!r} names {len(found)} of {sorted(labels)}')
  return found[0]


def _fewround(roots: List[str]) -> Callable[[List[str], str], str]:
  from tff_meta.analysis import fewround_report as fr  # pylint: disable=g-import-not-at-top
  entries, _ = fr.group(fr.find_runs(roots))

  def value(group: List[str], metric: str) -> str:
    setting = _one({e.setting.label for e in entries}, group[0])
    entry = next((e for e in entries if e.setting.label == setting and e.method == group[1]), None)
    if entry is None:
      raise PageError(f'no method {group[1]!r} in {setting}')
    if metric == 'code':
      return code_versions([run.path for run, _ in entry.members])
    rounds, what = metric.split(' ', 1)
    r = int(rounds.removeprefix('R'))
    if what.startswith('vs='):
      row = next(x for x in fr.entry_rows([e for e in entries if e.setting.label == setting],
                                          what[3:]) if x['method'] == entry.method and x['R'] == r)
      return f"{row['vs_reference']:+.2f}".replace('-', '−')
    return _format(dict(zip(entry.seeds, 100 * entry.per_seed(r))), what, 2)
  return value


def _recommend(roots: List[str]) -> Callable[[List[str], str], str]:
  from tff_meta.analysis import recommend_report as rr  # pylint: disable=g-import-not-at-top
  entries, _ = rr.group(rr.find_runs(roots))

  def value(group: List[str], metric: str) -> str:
    group, keep = _seeds(group)
    setting = _one({e.setting for e in entries}, group[0])
    entry = next((e for e in entries if e.setting == setting and e.method == group[1]), None)
    if entry is None:
      raise PageError(f'no method {group[1]!r} in {setting}')
    if metric == 'code':
      return code_versions([entry.by_seed[s][0].path for s in entry.seeds if keep(s)])
    key, what = metric.split(' ', 1)
    scale, digits = (1.0, 4) if key in ('rmse', 'ndcg@10') else (100.0, 2)
    if what.startswith('vs='):
      row = next(x for x in rr.entry_rows([e for e in entries if e.setting == setting], what[3:])
                 if x['method'] == entry.method)
      return _pm(row['vs_reference'], row['vs_reference_ci95'], 4)
    return _format({s: scale * v for s, v in entry.values(key).items() if keep(s)}, what, digits)
  return value


def _csv(roots: List[str]) -> Callable[[List[str], str], str]:
  (path,) = roots
  with open(path, newline='', encoding='utf-8') as f:
    rows = list(csv.DictReader(f))

  def value(group: List[str], metric: str) -> str:
    conditions = [g.split('=', 1) for g in group]
    found = [r for r in rows if all(r.get(k) == v for k, v in conditions)]
    column, _, what = metric.partition(' ')
    if not found or column not in found[0] or (not what and len(found) != 1):
      raise PageError(f'{path}: {len(found)} rows with {group}, or no column {column!r}')
    if not what:
      return found[0][column]
    return _format({int(r.get('seed', i)): float(r[column]) for i, r in enumerate(found)}, what, 2)
  return value


KINDS = {'report': _report, 'runs': _runs, 'rescored': _rescored, 'fewround': _fewround,
         'recommend': _recommend, 'csv': _csv}
