"""docs/RESULTS.md and docs/runs stay true to each other.

Every committed run folder names the code that wrote it (provenance.csv); every
marked number in the page's tables is recomputed from the run files its table
names, by the reports' own readers (tff_meta/analysis/results_page.py); every
`python -m programs.X` command in the page and the README names a program and
only flags it defines.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tff_meta.core import provenance
from tff_meta.analysis import results_page
from tff_meta.core.run_folder import PROVENANCE_FILE, RESULTS_FILE

RUNS = os.path.join(REPO, 'docs', 'runs')


def _result_folders(root: str):
  return sorted(d for d, _, names in os.walk(root) if RESULTS_FILE in names)


def test_every_committed_run_folder_has_a_provenance_file():
  folders = _result_folders(RUNS)
  assert len(folders) > 100, 'docs/runs lost its run folders'
  missing = [os.path.relpath(d, REPO) for d in folders
             if not os.path.exists(os.path.join(d, PROVENANCE_FILE))]
  assert not missing, f'run folders without {PROVENANCE_FILE}: {missing}'
  unreadable = [os.path.relpath(d, REPO) for d in folders if not provenance.read(d)]
  assert not unreadable, f'{PROVENANCE_FILE} without a readable row: {unreadable}'


def test_the_check_sees_a_folder_without_provenance(tmp_path):
  (tmp_path / 'a' / 'b').mkdir(parents=True)
  (tmp_path / 'a' / 'b' / RESULTS_FILE).write_text('{}')
  (tmp_path / 'c').mkdir()
  (tmp_path / 'c' / RESULTS_FILE).write_text('{}')
  (tmp_path / 'c' / PROVENANCE_FILE).write_text('time,code_version\n')
  assert _result_folders(str(tmp_path)) == [str(tmp_path / 'a' / 'b'), str(tmp_path / 'c')]
  assert not provenance.read(str(tmp_path / 'c'))


# ---- docs/RESULTS.md cannot drift from its run files, and its commands parse ----

PAGE = os.path.join(REPO, 'docs', 'RESULTS.md')
README = os.path.join(REPO, 'README.md')
# Flags absl defines for every program (parsed by absl itself, not by the program).
ABSL_FLAGS = {'help', 'helpshort', 'helpfull', 'helpxml', 'flagfile', 'undefok', 'logtostderr',
              'alsologtostderr', 'log_dir', 'verbosity', 'v', 'stderrthreshold', 'showprefixforinfo'}


def _read(path: str) -> str:
  with open(path, encoding='utf-8') as f:
    return f.read()


@pytest.fixture(scope='module')
def program_flags():
  """Every program the page and the README name -> its flags, collected in one process of its
  own (started first, so that it runs while the numbers are checked)."""
  modules = sorted({m for path in (PAGE, README) for m, _ in results_page.commands(_read(path))})
  proc = subprocess.Popen([sys.executable, '-m', 'tests.program_flags', ','.join(modules)], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
  yield lambda: json.loads(proc.communicate(timeout=300)[0])
  if proc.poll() is None:
    proc.kill()
    proc.wait()


def test_every_number_in_the_tables_is_the_run_files(program_flags):
  del program_flags   # started here, checked in test_every_command_parses
  found = results_page.values(_read(PAGE))
  assert len(found) > 150, 'the page lost its marked numbers'
  wrong = [f'line {n}: {marker}: page {written!r}, run files {computed!r}'
           for n, marker, written, computed in found if written != computed]
  assert not wrong, ('docs/RESULTS.md differs from its run files (`python -m '
                     'tff_meta.analysis.results_page --write` rewrites them):\n' + '\n'.join(wrong))


def test_a_number_changed_by_hand_is_caught():
  text = _read(PAGE)
  first = results_page.VALUE_RE.search(text)
  edited = text[:first.start(2)] + '9' + text[first.start(2) + 1:]   # its first digit
  assert edited != text
  (n, _, written, computed), = [v for v in results_page.values(edited)[:1]]
  assert written != computed and n == text[:first.start()].count('\n') + 1


def _tables(text: str):
  """(header cells, body rows) of every Markdown table."""
  lines = text.splitlines()
  i = 0
  while i < len(lines):
    if lines[i].startswith('|') and i + 1 < len(lines) and lines[i + 1].startswith('|---'):
      cells = lambda line: [c.strip() for c in line.strip().strip('|').split('|')]
      header, body, i = cells(lines[i]), [], i + 2
      while i < len(lines) and lines[i].startswith('|'):
        body.append(cells(lines[i]))
        i += 1
      yield header, body
    else:
      i += 1


def test_every_cell_of_ours_is_read_from_run_files():
  unmarked = []
  for header, body in _tables(_read(PAGE)):
    ours = [k for k, h in enumerate(header) if 'ours' in h.lower() and 'not kept' not in h]
    for row in body:
      for k in ours:
        cell = row[k] if k < len(row) else ''
        if cell and '<!--v ' not in cell and not cell.startswith('not '):
          unmarked.append(f'{row[0]} / {header[k]}: {cell!r}')
  assert not unmarked, 'numbers in "ours" columns without a run-file marker: ' + str(unmarked)


def test_the_page_is_a_results_page():
  text = _read(PAGE)
  assert len(text.splitlines()) <= 600
  for stale in ('superseded', 'queued', 'in the queue', 'still running', 'is running'):
    assert stale not in text.lower(), stale
  for anchor in re.findall(r'\]\(#([\w-]+)\)', text):   # the contents list links to sections
    assert any(_anchor(h) == anchor for h in re.findall(r'^## (.+)$', text, re.M)), anchor


def _anchor(heading: str) -> str:
  return re.sub(r'[^\w\- ]', '', heading.lower()).replace(' ', '-')


def test_every_command_parses(program_flags):
  flags_of = program_flags()
  problems = []
  for path in (PAGE, README):
    for module, used in results_page.commands(_read(path)):
      defined = flags_of.get(module)
      if defined is None:
        problems.append(f'{os.path.basename(path)}: {module} is not a program')
        continue
      known = set(defined) | ABSL_FLAGS | {f'no{f}' for f in defined}
      problems += [f'{os.path.basename(path)}: {module} has no flag --{f}'
                   for f in used if f not in known]
  assert not problems, problems


def test_commands_are_found_with_their_continuation_lines():
  text = ('x\n```sh\npython -m programs.train --config=a \\\n    --seed=1  # not --this\n'
          'S="python -m programs.sweep --grid=x"\n```\npython -m programs.outside --no\n')
  assert results_page.commands(text) == [('programs.train', ['config', 'seed']),
                                         ('programs.sweep', ['grid'])]


def test_the_readme_results_are_the_pages():
  """Each number in the README's results table ("ours") is one the page shows: a marked value
  (so read from run files), or a cell of the page's tables where no run files were kept."""
  page = _read(PAGE)
  shown = set()
  for _, _, written, _ in results_page.values(page):
    shown.update(re.findall(r'[−+-]?\d+\.\d+', written))
  for header, body in _tables(page):
    if any('not kept' in h for h in header):
      shown.update(n for row in body for cell in row for n in re.findall(r'\d+\.\d+', cell))
  shown |= {n.lstrip('+−-') for n in shown}
  section = _read(README).split("## The papers' results")[1].split('\n## ')[0]
  (header, body), = list(_tables(section))
  ours = header.index('ours')
  missing = [(row[0], n) for row in body for n in re.findall(r'[−-]?\d+\.\d+', row[ours])
             if n not in shown and n.lstrip('−-') not in shown]
  assert not missing, f"README numbers not on docs/RESULTS.md's pages: {missing}"
  assert all(len(cell) <= 200 for row in body for cell in row)


def test_spread_is_the_sample_std():
  assert results_page.spread([1.0, 2.0, 3.0]) == '2.00 ± 1.00'   # ddof = 0 would give 0.82
  assert results_page.spread([0.91]) == '0.91'
  assert results_page.spread([0.9, 0.92], digits=4) == '0.9100 ± 0.0141'


def test_blocks_are_their_files():
  text = _read(PAGE)
  found = results_page.blocks(text)
  assert {kind for kind, _, _ in found} == set(results_page.BLOCKS)
  stale = [kind for kind, written, computed in found if written != computed]
  assert not stale, f'blocks differ from their files (results_page --write): {stale}'
  edited = text.replace('| ≤ 1.2 |', '| ≤ 9.9 |', 1)   # a target typed by hand
  assert edited != text and any(w != c for _, w, c in results_page.blocks(edited))
