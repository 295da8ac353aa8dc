r"""docs/RESULTS.md's numbers, read from the run files each table names, by the reports' own code.

A table in the page declares where its numbers come from in an HTML comment
(hidden when the page is rendered), one per source:

    <!-- source fm: report docs/runs/fedmeta -->

`fm` is the source's name, `report` its kind and the rest the folders (or file)
it reads, comma-separated, as the program's flag takes them:

- `report`: run folders of programs.train / compare / reproduce, grouped as
  `programs.report` groups them (`analysis.groups`);
- `runs`: run folders read one by one (`run_folder.read_results`), grouped by method only,
  for folders without metrics.csv (programs.compare's, which programs.report cannot group);
- `rescored`: programs.evaluate score files, as `programs.report --scores` reads them;
- `fewround`: programs.train folders, as `programs.report` groups them;
- `recommend`: programs.train folders, as `programs.report` groups them;
- `csv`: one CSV file a program wrote (comparison.csv, privacy_curve.csv).

A number in a table is then written between two markers,

    <!--v fm; emnist, femnist_cnn, p=20%; FedMeta(MAML) [weighting=num_examples]; sd-->83.73 ± 0.91<!--/v-->

naming the source, the group (`;`-separated: the setting, then the method, as
the report labels them; a `fewround` or `recommend` setting may be any part of
its label that names one setting) and the metric:

- a `report` metric `rounds_to=0.74 sd` (or `mb_to=`, `gflops_to=`): the cost to the first
  evaluation at that test accuracy, as programs.report's cost columns count it;
- `code`: the code versions that wrote the group's folders (their provenance.csv);
- a trailing group part `seeds=0-4` keeps those seeds only (`report`, `recommend`);
- `sd`: mean ± sample std over seeds (ddof = 1), or the one value of a single seed;
- `mean`, `n` (number of seeds), `seeds` ("0, 1, 2");
- `vs=<reference>`: the paired difference to the reference method on the same
  clients / episodes / users, mean ± 95% CI, as the report computes it;
- a `fewround` metric takes the rounds first: `R3 sd`, `R1 mean`, `R3 vs=finetune_fedavg`;
- a `recommend` metric names the results.json column: `rmse sd`, `precision@1 mean`;
- a `report` metric may name another `results.json` summary key first: `known_accuracy sd`;
- a `csv` group is `column=value` conditions; its metric a column, printed as written for
  one row, or with `sd` / `mean` / `n` over the rows (seeds) that match: `accuracy sd`.

A whole block the analysis code writes (a table, a figure's image link) sits
between

    <!-- block speed_targets: docs/runs/scaling_256 -->
    ...
    <!-- /block -->

with the block's kind (`BLOCKS`) and its files (paths from the repository,
space-separated): `speed_targets` (a folder of speed CSVs: the targets
table, `analysis.speed`) and `scaling_figure` (the CSVs, then the PNG it
draws: the image link; the PNG is drawn by `--write` only).

`python -m tff_meta.analysis.results_page --write` fills every marked number and block in
from the run files; `--check` exits 1 when one differs (tests/test_results_page.py).
It reads files only; grouping training runs imports TensorFlow for the configs' defaults.
"""

from __future__ import annotations

import csv
import functools
import os
import re
import sys
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from tff_meta.analysis import tables
from tff_meta.core import files

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    'docs', 'RESULTS.md')
SOURCE_RE = re.compile(r'<!-- source (\w+): (\w+) (\S+) -->')
VALUE_RE = re.compile(r'<!--v ([^>]*?)-->(.*?)<!--/v-->')
BLOCK_RE = re.compile(r'(<!-- block (\w+): ([^>]*?) -->\n)(.*?)(<!-- /block -->)', re.DOTALL)


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


def code_versions(folders: Sequence[str]) -> str:
  """The code versions that wrote `folders` (provenance.csv), oldest first, 7 digits each."""
  from tff_meta.core import provenance  # pylint: disable=g-import-not-at-top
  seen: Dict[str, None] = {}
  for folder in folders:
    for row in provenance.read(folder) or [{'code_version': 'not recorded'}]:
      v = row['code_version']
      seen.setdefault(v if v in (provenance.UNKNOWN, 'not recorded') else v[:7], None)
  return ', '.join(seen)


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
    g = by_key.get(tuple(group))
    if g is None:
      raise PageError(f'no group {group}; there are {sorted(by_key)}')
    runs = [r for r in g.runs if keep(r.seed)]
    if metric == 'code':
      return code_versions([r.path for r in runs])
    key, _, what = metric.rpartition(' ')
    if key.startswith(('rounds_to=', 'mb_to=', 'gflops_to=')):
      return _format(_cost(runs, key), what, 0)
    return _format({r.seed: float(r.summary[key or 'accuracy']) for r in runs}, what, 2)
  return value


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


@functools.lru_cache(maxsize=None)
def _source(kind: str, roots: str) -> Callable[[List[str], str], str]:
  if kind not in KINDS:
    raise PageError(f'unknown source kind {kind!r} ({", ".join(KINDS)})')
  return KINDS[kind]([os.path.join(_repo(), r) for r in roots.split(',')])


def _repo() -> str:
  return os.path.dirname(os.path.dirname(PAGE))


def values(text: str) -> List[Tuple[int, str, str, str]]:
  """(line number, marker, written value, value from the run files) for every marked number."""
  sources: Dict[str, Tuple[str, str]] = {}
  out = []
  for number, line in enumerate(text.splitlines(), 1):
    for m in SOURCE_RE.finditer(line):
      sources[m.group(1)] = (m.group(2), m.group(3))
    for m in VALUE_RE.finditer(line):
      parts = [p.strip() for p in m.group(1).split(';')]
      if len(parts) < 3 or parts[0] not in sources:
        raise PageError(f'line {number}: marker {m.group(1)!r} names no declared source')
      try:
        computed = _source(*sources[parts[0]])(parts[1:-1], parts[-1])
      except (PageError, ValueError, KeyError, StopIteration) as e:
        raise PageError(f'line {number}: {m.group(1)!r}: {e}') from None
      out.append((number, m.group(1), m.group(2), computed))
  return out


def _speed_targets(paths: List[str], draw: bool) -> str:
  del draw
  from tff_meta.analysis import speed  # pylint: disable=g-import-not-at-top
  (folder,) = paths
  return speed.targets_markdown(folder) + '\n'


def _scaling_figure(paths: List[str], draw: bool) -> str:
  from tff_meta.analysis import speed  # pylint: disable=g-import-not-at-top
  *csvs, png = paths
  if draw:
    speed.scaling_figure(csvs, png)
  return (f'![Seconds per round against clients per round]'
          f'({os.path.relpath(png, os.path.dirname(PAGE))})\n')


BLOCKS = {'speed_targets': _speed_targets, 'scaling_figure': _scaling_figure}


def blocks(text: str, draw: bool = False) -> List[Tuple[str, str, str]]:
  """(block kind, written text, text from the files) for every block; `draw` writes figures."""
  out = []
  for m in BLOCK_RE.finditer(text):
    if m.group(2) not in BLOCKS:
      raise PageError(f'unknown block kind {m.group(2)!r} ({", ".join(BLOCKS)})')
    paths = [os.path.join(_repo(), p) for p in m.group(3).split()]
    try:
      out.append((m.group(2), m.group(4), BLOCKS[m.group(2)](paths, draw)))
    except (ValueError, KeyError, OSError) as e:
      raise PageError(f'block {m.group(2)} ({m.group(3)}): {e}') from None
  return out


def write(text: str, draw: bool = False) -> str:
  """`text` with every marked number and block replaced by its value from the run files."""
  computed = iter(v[3] for v in values(text))
  text = VALUE_RE.sub(lambda m: f'<!--v {m.group(1)}-->{next(computed)}<!--/v-->', text)
  filled = iter(b[2] for b in blocks(text, draw))
  return BLOCK_RE.sub(lambda m: m.group(1) + next(filled) + m.group(5), text)


COMMAND_RE = re.compile(r'python -m (programs\.\w+)((?:\\\n|[^\n])*)')
FLAG_RE = re.compile(r'(?<![\w-])--(\w+)')


def commands(text: str) -> List[Tuple[str, List[str]]]:
  """(program module, [flag names]) of every `python -m programs.X ...` in the page's fenced
  code blocks; a command may continue over lines ending in a backslash."""
  blocks = re.findall(r'^```[^\n]*\n(.*?)^```', text, re.MULTILINE | re.DOTALL)
  return [(m.group(1), FLAG_RE.findall(m.group(2).split('#')[0]))
          for block in blocks for m in COMMAND_RE.finditer(block)]


def main(argv: Sequence[str]) -> int:
  with open(PAGE, encoding='utf-8') as f:
    text = f.read()
  if '--write' in argv:
    files.write_text(PAGE, write(text, draw=True))   # atomic: a failed fill leaves the page
    return 0
  wrong = [v for v in values(text) if v[2] != v[3]]
  for number, marker, written, computed in wrong:
    print(f'docs/RESULTS.md:{number}: {marker}: the page says {written!r}, the run files '
          f'{computed!r}', file=sys.stderr)
  stale = [b for b in blocks(text) if b[1] != b[2]]
  for kind, _, _ in stale:
    print(f'docs/RESULTS.md: the {kind} block differs from its files (run --write)',
          file=sys.stderr)
  return 1 if wrong or stale else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
