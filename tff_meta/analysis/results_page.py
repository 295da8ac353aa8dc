r"""docs/RESULTS.md's numbers, read from the run files each table names, by the reports' own code.

A table in the page declares where its numbers come from in an HTML comment
(hidden when the page is rendered), one per source:

    <!-- source fm: report docs/runs/fedmeta -->

`fm` is the source's name, `report` its kind and the rest the folders (or file)
it reads, comma-separated, as the program's flag takes them. A source whose runs are
still to come ends in ` pending` (`<!-- source fe: runs docs/runs/fedec pending -->`):
while none of its folders exists, each of its numbers reads `PENDING`; once they
exist they are read like any other's (then drop the word).

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
- `code`: the code versions that wrote the group's folders (their provenance.csv), marked
  "(reconstructed)" where a folder's provenance was written after the run, and
  "(resumed under a newer commit)" where one folder was written by several versions;
- `hours` (a `report` metric): the range over the group's runs of their round time
  (`train_seconds`: the sum of metrics.csv's `round_seconds`), in hours; the group's
  method `*` takes every method of the setting;
- `round_seconds=a-b sd` (a `report` metric): the median round time over rounds a-b;
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
table, `analysis.speed`), `table2`, `table2_paired`, `table2_targets` and `table2_cost` (a
folder of FedMeta Table 2 runs: `analysis.table2`) and `figure` (a kind of `page_figures.FIGURES`,
its sources, then the PNG it draws: the image link; the PNG is drawn by
`--write` only, and `stale_figures` compares its picture data with a redraw).

`python -m tff_meta.analysis.results_page --write` fills every marked number and block in
from the run files and redraws every figure, on each page of `PAGES`; `--check` exits 1
when one differs (tests/test_results_page.py).
It reads files only; grouping training runs imports TensorFlow for the configs' defaults.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import Callable, Dict, List, Sequence, Tuple

from tff_meta.analysis import table2
from tff_meta.analysis.page_sources import KINDS, PageError
from tff_meta.core import files

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    'docs', 'RESULTS.md')
PAGES = (PAGE, os.path.join(os.path.dirname(PAGE), 'notes', 'demo.md'))
SOURCE_RE = re.compile(r'<!-- source (\w+): (\w+) (\S+)( pending)? -->')
PENDING = 'PENDING'
IMAGE_RE = re.compile(r'!\[([^\]]*)\]\(([^)]+\.png)\)')
VALUE_RE = re.compile(r'<!--v ([^>]*?)-->(.*?)<!--/v-->')
BLOCK_RE = re.compile(r'(<!-- block (\w+): ([^>]*?) -->\n)(.*?)(<!-- /block -->)', re.DOTALL)


@functools.lru_cache(maxsize=None)
def _source(kind: str, roots: str, pending: bool = False) -> Callable[[List[str], str], str]:
  if kind not in KINDS:
    raise PageError(f'unknown source kind {kind!r} ({", ".join(KINDS)})')
  paths = [os.path.join(_repo(), r) for r in roots.split(',')]
  if pending and not any(os.path.exists(p) for p in paths):
    return lambda group, metric: PENDING
  return KINDS[kind](paths)


def _repo() -> str:
  return os.path.dirname(os.path.dirname(PAGE))


def values(text: str) -> List[Tuple[int, str, str, str]]:
  """(line number, marker, written value, value from the run files) for every marked number."""
  sources: Dict[str, Tuple[str, str, bool]] = {}
  out = []
  for number, line in enumerate(text.splitlines(), 1):
    for m in SOURCE_RE.finditer(line):
      sources[m.group(1)] = (m.group(2), m.group(3), bool(m.group(4)))
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


def _figure(args: List[str], written: str, draw: bool, page: str) -> str:
  """A figure block: `<kind> <source>... <png>` -> its image link (the alt text as written);
  `draw` redraws the PNG from the sources."""
  from tff_meta.analysis import page_figures  # pylint: disable=g-import-not-at-top
  kind, *sources, png = args
  if draw:
    page_figures.draw(kind, sources, png, _repo())
  m = IMAGE_RE.search(written)
  alt = m.group(1) if m else kind
  rel = os.path.relpath(os.path.join(_repo(), png), os.path.dirname(page))
  return f'![{alt}]({rel})\n'


def _table2(kind: str, paths: List[str], draw: bool) -> str:
  """A block of `analysis.table2` (its `BLOCKS`) from one folder of Table 2 runs."""
  del draw
  (folder,) = paths
  return table2.BLOCKS[kind](folder) + '\n'


BLOCKS = {'speed_targets': _speed_targets, 'figure': _figure,
          **{kind: functools.partial(_table2, kind) for kind in table2.BLOCKS}}


def blocks(text: str, draw: bool = False, page: str = PAGE) -> List[Tuple[str, str, str]]:
  """(block kind, written text, text from the files) for every block; `draw` writes figures."""
  out = []
  for m in BLOCK_RE.finditer(text):
    if m.group(2) not in BLOCKS:
      raise PageError(f'unknown block kind {m.group(2)!r} ({", ".join(BLOCKS)})')
    args = m.group(3).split()
    try:
      if m.group(2) == 'figure':
        computed = _figure(args, m.group(4), draw, page)
      else:
        computed = BLOCKS[m.group(2)]([os.path.join(_repo(), p) for p in args], draw)
      out.append((m.group(2), m.group(4), computed))
    except (ValueError, KeyError, OSError) as e:
      raise PageError(f'block {m.group(2)} ({m.group(3)}): {e}') from None
  return out


def figures(text: str) -> List[Tuple[str, str, List[str]]]:
  """(kind, png, sources) of every figure block, paths from the repository."""
  return [(args[0], args[-1], args[1:-1]) for m in BLOCK_RE.finditer(text)
          if m.group(2) == 'figure' for args in [m.group(3).split()]]


def stale_figures(text: str) -> List[str]:
  """The PNGs of `text`'s figure blocks whose picture data differ from a redraw from their
  sources (or that store none)."""
  from tff_meta.analysis import figures as figures_lib, page_figures  # pylint: disable=g-import-not-at-top
  stale = []
  for kind, png, sources in figures(text):
    path = os.path.join(_repo(), png)
    stored = figures_lib.read_picture_data(path) if os.path.exists(path) else {}
    if not stored or stored != page_figures.redrawn(kind, sources, png, _repo()):
      stale.append(png)
  return stale


def write(text: str, draw: bool = False, page: str = PAGE) -> str:
  """`text` with every marked number and block replaced by its value from the run files."""
  computed = iter(v[3] for v in values(text))
  text = VALUE_RE.sub(lambda m: f'<!--v {m.group(1)}-->{next(computed)}<!--/v-->', text)
  filled = iter(b[2] for b in blocks(text, draw, page))
  return BLOCK_RE.sub(lambda m: m.group(1) + next(filled) + m.group(5), text)


COMMAND_RE = re.compile(r'python -m ((?:programs|research)\.\w+)((?:\\\n|[^\n])*)')
FLAG_RE = re.compile(r'(?<![\w-])--(\w+)')


def commands(text: str) -> List[Tuple[str, List[str]]]:
  """(program module, [flag names]) of every `python -m programs.X ...` (or `research.X`) in the page's fenced
  code blocks; a command may continue over lines ending in a backslash."""
  blocks = re.findall(r'^```[^\n]*\n(.*?)^```', text, re.MULTILINE | re.DOTALL)
  return [(m.group(1), FLAG_RE.findall(m.group(2).split('#')[0]))
          for block in blocks for m in COMMAND_RE.finditer(block)]


def main(argv: Sequence[str]) -> int:
  failed = False
  for page in PAGES:
    name = os.path.relpath(page, _repo())
    with open(page, encoding='utf-8') as f:
      text = f.read()
    if '--write' in argv:
      files.write_text(page, write(text, draw=True, page=page))   # atomic: a failed fill leaves it
      continue
    wrong = [v for v in values(text) if v[2] != v[3]]
    for number, marker, written, computed in wrong:
      print(f'{name}:{number}: {marker}: the page says {written!r}, the run files '
            f'{computed!r}', file=sys.stderr)
    stale = [b for b in blocks(text, page=page) if b[1] != b[2]]
    for kind, _, _ in stale:
      print(f'{name}: the {kind} block differs from its files (run --write)', file=sys.stderr)
    drawn = stale_figures(text)
    for png in drawn:
      print(f'{name}: {png} differs from a redraw from its runs (run --write)', file=sys.stderr)
    failed = failed or bool(wrong or stale or drawn)
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
