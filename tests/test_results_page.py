"""docs/RESULTS.md, the README and docs/runs stay true to each other.

Every committed run folder names the code that wrote it (provenance.csv); every
marked number in the page's tables is recomputed from the run files its table
names, by the reports' own readers (tff_meta/analysis/results_page.py); every
`python -m programs.X` command in the page and the README names a program and
only flags it defines. The claims around the numbers are held too (issue #66):
every "±" says what it is or is a sample std over seeds; every runtime claim is
read from run files; every figure is referenced and redrawn from its cited runs;
every *Code* cell says when a folder's provenance was reconstructed or several
commits wrote one folder; no page names a folder outside the repository, a
branch or a session; the README's results say how each setting was chosen.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tff_meta.core import provenance
from tff_meta.analysis import figures, page_sources, results_page, table2
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
  modules = sorted({m for path in (PAGE, README) for m, _ in results_page.commands(_read(path))}
                   | {key for key, _ in _docstring_commands()})
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


def _without_blocks(text: str) -> str:
  """`text` without its blocks, whose tables the analysis code writes from their files
  (test_blocks_are_their_files)."""
  return results_page.BLOCK_RE.sub('', text)


def test_every_cell_of_ours_is_read_from_run_files():
  unmarked = []
  for header, body in _tables(_without_blocks(_read(PAGE))):
    ours = [k for k, h in enumerate(header) if 'ours' in h.lower()]
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


def _docstring_commands():
  """('programs.X@<config>', [flag names]) of each example command with a --config in the
  programs' docstrings: the flags must be that config's task's, not any task's."""
  found = []
  for name in sorted(os.listdir(os.path.join(REPO, 'programs'))):
    if name.endswith('.py'):
      for m in re.finditer(r'python -m (programs\.\w+)([^\n]*--config=(configs/\S+\.toml)[^\n]*)',
                           _read(os.path.join(REPO, 'programs', name))):
        found.append((f'{m.group(1)}@{m.group(3)}', results_page.FLAG_RE.findall(m.group(2))))
  return found


def test_every_docstring_command_takes_its_configs_flags(program_flags):
  flags_of = program_flags()
  found = _docstring_commands()
  assert len(found) >= 3, 'the programs lost their example commands'
  problems = [f'{key} has no flag --{f}' for key, used in found for f in used
              if f not in set(flags_of[key]) | ABSL_FLAGS]
  assert not problems, problems


def test_commands_are_found_with_their_continuation_lines():
  text = ('x\n```sh\npython -m programs.train --config=a \\\n    --seed=1  # not --this\n'
          'S="python -m programs.sweep --grid=x"\n```\npython -m programs.outside --no\n')
  assert results_page.commands(text) == [('programs.train', ['config', 'seed']),
                                         ('programs.sweep', ['grid'])]


def test_the_readme_results_are_the_pages():
  """Each number in the README's results table ("ours") is one the page shows as a marked
  value, so read from run files."""
  page = _read(PAGE)
  shown = set()
  for _, _, written, _ in results_page.values(page):
    shown.update(re.findall(r'[−+-]?\d+\.\d+', written))
  shown |= {n.lstrip('+−-') for n in shown}
  (header, body), = list(_tables(_readme_results()))
  ours = header.index('ours')
  missing = [(row[0], n) for row in body for n in re.findall(r'[−-]?\d+\.\d+', row[ours])
             if n not in shown and n.lstrip('−-') not in shown]
  assert not missing, f"README numbers not on docs/RESULTS.md's pages: {missing}"
  assert all(len(cell) <= 200 for row in body for cell in row)


def test_spread_is_the_sample_std():
  assert page_sources.spread([1.0, 2.0, 3.0]) == '2.00 ± 1.00'   # ddof = 0 would give 0.82
  assert page_sources.spread([0.91]) == '0.91'
  assert page_sources.spread([0.9, 0.92], digits=4) == '0.9100 ± 0.0141'


def test_blocks_are_their_files():
  text = _read(PAGE)
  found = results_page.blocks(text)
  # Every kind is on the page but FedMeta Table 2's, which wait for its runs in
  # docs/runs/fedmeta_308 (issue 65) and are built from a generated folder in
  # tests/analysis/test_table2.py.
  assert {kind for kind, _, _ in found} | set(table2.BLOCKS) == set(results_page.BLOCKS)
  stale = [kind for kind, written, computed in found if written != computed]
  assert not stale, f'blocks differ from their files (results_page --write): {stale}'
  edited = text.replace('| ≤ 1.2 |', '| ≤ 9.9 |', 1)   # a target typed by hand
  assert edited != text and any(w != c for _, w, c in results_page.blocks(edited))



def _readme_results() -> str:
  return _read(README).split("## The papers' results")[1].split('\n## ')[0]


# ---- every "±" says what it is ----

DEFINED = ('CI', 'std', 'ddof', 'interval')   # words that say what a "±" is


def _outside_markers(text: str) -> str:
  """`text` with marked values, blocks, fenced code and HTML comments removed."""
  text = re.sub(r'^```.*?^```', '', text, flags=re.M | re.S)
  text = results_page.BLOCK_RE.sub('', text)
  text = results_page.VALUE_RE.sub('<V>', text)
  return re.sub(r'<!--.*?-->', '', text, flags=re.S)


def _pm_problems(page: str, readme_results: str):
  """The "±" that say nothing of what they are. On the page: a marked value's "±" is a
  sample std (`sd`, the page's definition) or a paired interval (`vs=`), which its column,
  row or paragraph must call a CI; any other "±" of ours needs a defining word beside it
  (a paper's column prints the paper's own). In the README's results: a pair that the
  page shows as a paired interval must say "95% CI" in its cell."""
  problems = []
  paired = set()
  for header, body in _tables(page):
    for row in body:
      for k, cell in enumerate(row):
        head = header[k] if k < len(header) else ''
        for m in results_page.VALUE_RE.finditer(cell):
          if 'vs=' in m.group(1) and '±' in m.group(2):
            paired.add(m.group(2))
            if not any(w in head + row[0] + cell for w in DEFINED):
              problems.append(f'page: {row[0]} / {head}: {m.group(2)} is an interval unnamed')
        rest = _outside_markers(cell)
        if '±' in rest and 'paper' not in head.lower() and not any(w in head + rest
                                                                      for w in DEFINED):
          problems.append(f'page: {row[0]} / {head}: {rest}')
  prose = '\n'.join(line for line in page.splitlines() if not line.startswith('|'))
  for paragraph in re.split(r'\n\s*\n', prose):
    for m in results_page.VALUE_RE.finditer(paragraph):
      if 'vs=' in m.group(1) and '±' in m.group(2):
        paired.add(m.group(2))
        if 'CI' not in paragraph:
          problems.append(f'page: {m.group(2)} (a paired interval) in: {paragraph[:80]!r}')
    rest = _outside_markers(paragraph)
    if '±' in rest and not any(w in rest for w in DEFINED):
      problems.append(f'page: an unnamed "±" in: {paragraph[:80]!r}')
  (header, body), = list(_tables(readme_results))
  ours = header.index('ours')
  for row in body:
    for pair in paired:
      if pair in row[ours] and '95% CI' not in row[ours].split(pair)[1][:12]:
        problems.append(f'README: {row[0]} / {row[1]}: {pair} is a 95% CI, not said')
  if 'sample std' not in readme_results.split('|')[0]:
    problems.append('README: the results section does not say what "±" is')
  return problems


def test_every_plus_minus_says_what_it_is():
  assert not _pm_problems(_read(PAGE), _readme_results())


def test_an_unnamed_interval_is_caught():
  readme = _readme_results()
  assert '−0.0033 ± 0.0019 (95% CI)' in readme
  problems = _pm_problems(_read(PAGE), readme.replace('−0.0033 ± 0.0019 (95% CI)',
                                                      '−0.0033 ± 0.0019'))
  assert len(problems) == 1 and 'Recommendation' in problems[0]
  page = _read(PAGE).replace('(paired, 95% CIs;', '(', 1)
  assert any('paired interval' in p for p in _pm_problems(page, readme))


# ---- every runtime claim is read from run files ----

TIME_RE = re.compile(r'\d[\d.,]*\s*(?:-\s*[\d.]+\s*)?(?:CPU\s+)?'
                     r'(?:s|ms|sec|seconds|min|minutes|h|hours?)\b')


def test_every_runtime_claim_is_read_from_run_files():
  """A duration on the results page is a marked value (`hours`, `round_seconds=`), so read
  from the runs' metrics.csv, or sits in a block its files fill."""
  found = TIME_RE.findall(_outside_markers(_read(PAGE)))
  assert not found, f'durations on docs/RESULTS.md not read from run files: {found}'
  assert TIME_RE.search('took 0.2-0.5 hours of round time') and TIME_RE.search('about 216 CPU hours')


def test_round_time_metrics_by_hand(tmp_path):
  for name, seconds in (('a', [1.0, 3.0, 2.0]), ('b', [7200.0, 0.0, 0.0])):
    (tmp_path / name).mkdir()
    (tmp_path / name / 'metrics.csv').write_text(
        'round,round_seconds\n' + ''.join(f'{k + 1},{s}\n' for k, s in enumerate(seconds)))
  assert page_sources._round_seconds(str(tmp_path / 'a')) == {1: 1.0, 2: 3.0, 3: 2.0}
  assert page_sources._hours([7200.0, 3600.0, 0.0]) == '1.00-2.00 hours (3 runs; 1 record none)'
  assert page_sources._hours([5400.0]) == '1.50 hours'


# ---- every figure is referenced, and redrawn from its cited runs ----

FIGURES = os.path.join(REPO, 'docs', 'figures')


def _pages():
  """Every page a reader opens: the README, docs/*.md, docs/notes/*.md, every .md under
  docs/runs (its folders' READMEs, the pages written by hand beside them and the programs'
  tables), and the notebook."""
  import glob   # pylint: disable=g-import-not-at-top
  found = [README, os.path.join(REPO, 'notebooks', 'quickstart.ipynb')]
  for pattern in ('docs/*.md', 'docs/notes/*.md', 'docs/runs/**/*.md'):
    found += glob.glob(os.path.join(REPO, pattern), recursive=True)
  return sorted(found)


def test_every_figure_is_referenced_and_drawn_by_a_page_block():
  referenced = {}
  for path in _pages():
    for png in re.findall(r'([\w.-]+\.png)', _read(path)):
      referenced.setdefault(png, []).append(os.path.relpath(path, REPO))
  on_disk = sorted(n for n in os.listdir(FIGURES) if n.endswith('.png'))
  assert on_disk, 'docs/figures lost its figures'
  unused = [n for n in on_disk if n not in referenced]
  assert not unused, f'figures no page shows (delete them; git keeps history): {unused}'
  drawn = {os.path.basename(png) for page in results_page.PAGES
           for _, png, _ in results_page.figures(_read(page))}
  undrawn = [n for n in on_disk if n not in drawn]
  assert not undrawn, f'figures no page block draws from its runs: {undrawn}'


@pytest.mark.slow
def test_every_figure_is_its_runs_redrawn():
  """The plotted series of each figure block's PNG equal a redraw from the block's sources."""
  stale = [png for page in results_page.PAGES for png in results_page.stale_figures(_read(page))]
  assert not stale, ('figures differ from a redraw from their runs (python -m '
                     'tff_meta.analysis.results_page --write): ' + str(stale))


def test_picture_data_sees_a_changed_series(tmp_path):
  histories = {'A': [{'round': 0, 'test_accuracy': 0.1}, {'round': 5, 'test_accuracy': 0.5}]}
  figures.plot_convergence(histories, str(tmp_path / 'a.png'))
  data = figures.read_picture_data(str(tmp_path / 'a.png'))
  (line,) = data['panels'][0]['lines']
  assert (line['label'], line['x'], line['y']) == ('A', [0.0, 5.0], [10.0, 50.0])
  histories['A'][1]['test_accuracy'] = 0.6
  figures.plot_convergence(histories, str(tmp_path / 'b.png'))
  assert figures.read_picture_data(str(tmp_path / 'b.png')) != data


# ---- every Code cell names its folders' commits, and says when they were reconstructed ----

def _provenance(folder, versions, note=''):
  os.makedirs(folder)
  with open(os.path.join(folder, PROVENANCE_FILE), 'w', encoding='utf-8') as f:
    f.write('time,code_version,start,command,machine,note\n')
    f.writelines(f't,{v},0,c,m,{note}\n' for v in versions)


def test_code_versions_say_reconstructed_and_resumed(tmp_path):
  a, b, c = (str(tmp_path / n) for n in 'abc')
  _provenance(a, ['1111111aaaa'])
  _provenance(b, ['2222222bbbb', '3333333cccc'])
  _provenance(c, ['4444444dddd'], note='reconstructed on 2026-12-04 from git history')
  assert page_sources.code_versions([a]) == '1111111'
  assert page_sources.code_versions([a, b]) == ('1111111, 2222222, 3333333 '
                                                '(resumed under a newer commit: 1 of 2 folders)')
  assert page_sources.code_versions([c]) == '4444444 (reconstructed)'
  assert page_sources.code_versions([a, c]) == '1111111, 4444444 (reconstructed: 1 of 2 folders)'
  d = str(tmp_path / 'd')   # reconstructed, then finished by a later commit: both are said
  _provenance(d, ['5555555eeee', '6666666ffff'], note='reconstructed from git history')
  assert page_sources.code_versions([d]) == ('5555555, 6666666 (reconstructed) '
                                             '(resumed under a newer commit)')


def test_code_versions_keep_the_dirty_mark(tmp_path):
  """A run from a checkout with uncommitted changes says so on the page: the cut to 7 digits
  keeps `+dirty`, and a dirty and a clean run of one commit are two versions."""
  a, b = (str(tmp_path / n) for n in 'ab')
  _provenance(a, ['663b02a8670b+dirty'])
  _provenance(b, ['663b02a8670b'])
  assert page_sources.code_versions([a]) == '663b02a+dirty'
  assert page_sources.code_versions([a, b]) == '663b02a+dirty, 663b02a'


def test_every_code_cell_is_read_from_provenance():
  """Every cell of a "code" column, and every "code" named beside a table's seeds, is a
  `code` marker: `code_versions` of its folders (checked against provenance.csv by the
  numbers' test), so it says "reconstructed" or "resumed" where one commit per folder is not
  the whole story."""
  text = _read(PAGE)
  typed = []
  for header, body in _tables(_without_blocks(text)):
    for k in [k for k, h in enumerate(header) if h.lower() == 'code']:
      typed += [f'{row[0]}: {row[k]}' for row in body
                if k < len(row) and row[k] and '; code-->' not in row[k]
                and not row[k].startswith('as the ')]   # 'as the 20% cells'
  assert not typed, f'Code cells typed by hand: {typed}'
  found = [w for _, m, w, _ in results_page.values(text) if m.endswith('; code')]
  assert len(found) > 10 and any('(reconstructed' in w for w in found)
  reconstructed = [d for d in _result_folders(RUNS) if page_sources.reconstructed(d)]
  assert len(reconstructed) >= 22   # docs/runs' folders whose provenance was written afterwards


# ---- no page names a folder outside the repository, a branch or a session ----

NAMES_OUTSIDE = re.compile(
    r'/work/|\bbranch(?:es|\'s)?\b|\bworktree of\b|'
    r'\b(?:this|earlier|previous|next|a|the|one) session\b|\bsession note', re.I)


def test_no_page_names_outside_folders_branches_or_sessions():
  pages = _pages() + [os.path.join(REPO, 'requirements.txt')]
  found = [f'{os.path.relpath(p, REPO)}: {m.group(0)!r}' for p in sorted(set(pages))
           for m in NAMES_OUTSIDE.finditer(_read(p))
           if not re.search(r'restart the session|This session had|the session may',
                            _read(p)[max(0, m.start() - 30):m.end() + 30])]
  found += [f'{os.path.relpath(p, REPO)}: {path!r}' for p in sorted(set(pages))
            for path in _paths_outside(p, _read(p))]
  assert not found, found
  assert NAMES_OUTSIDE.search('on this branch and on main') and NAMES_OUTSIDE.search(
      'in the session note of')
  readme = os.path.join(REPO, 'README.md')
  assert _paths_outside(readme, 'data in ../data/README.md, docs in docs/../docs/X.md') == [
      '../data']


def _paths_outside(page, text):
  """The relative paths in `text` that climb out of the repository from `page`'s folder (a
  folder beside the clone, which a user's clone does not have)."""
  out = []
  for m in re.finditer(r'(?<![\w/.])(?:\.\./)+[\w.-]+', text):
    target = os.path.normpath(os.path.join(os.path.dirname(page), m.group(0)))
    if os.path.relpath(target, REPO).startswith('..'):
      out.append(m.group(0))
  return out


# ---- the README's results say how each number's settings were chosen ----

CHOSEN = ("paper's settings", 'chosen on validation', 'seen on test before the choice (see §',
          'no search')


def test_the_readme_results_say_how_each_setting_was_chosen():
  (header, body), = list(_tables(_readme_results()))
  k = header.index('how chosen')
  for row in body:
    if row[2].startswith('not run'):
      assert row[k] == '—', row
      continue
    assert any(c in row[k] for c in CHOSEN), row
  page = _read(PAGE)
  for row in body:   # a "seen on test" row points at a section whose selections say so
    for n in re.findall(r'seen on test before the choice \(see §(\d)', row[k]):
      section = page.split(f'\n## {n}. ')[1].split('\n## ')[0]
      assert 'Selections' in section and ('test' in section.lower()), (row[0], n)
