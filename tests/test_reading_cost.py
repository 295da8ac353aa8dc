"""docs/ARCHITECTURE.md's reading-cost table is what `.ci/reading_cost.py` counts now: the
files exactly, the lines within 10% (edits elsewhere move them a little). No TF."""
import importlib.util
import os
import re
import sys
from pathlib import Path

REPO = Path(os.path.realpath(__file__)).parent.parent
_spec = importlib.util.spec_from_file_location('reading_cost', REPO / '.ci' / 'reading_cost.py')
reading_cost = sys.modules['reading_cost'] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reading_cost)


def test_the_table_is_the_count():
  text = (REPO / 'docs' / 'ARCHITECTURE.md').read_text()
  for label, entries, within in reading_cost.COUNTS:
    found = reading_cost.closure(entries, within)
    files, lines = len(found), sum(found.values())
    row = re.search(r'^\| ' + re.escape(label) + r' \| (\d+) \| ~?([\d,]+) \|$', text, re.M)
    assert row, f'no row for {label!r} in docs/ARCHITECTURE.md'
    assert int(row.group(1)) == files, f'{label}: {files} files (python .ci/reading_cost.py)'
    documented = int(row.group(2).replace(',', ''))
    assert abs(documented - lines) <= 0.1 * lines, f'{label}: {lines:,} lines'


def test_a_package_init_counts_only_for_a_name_it_defines(tmp_path, monkeypatch):
  (tmp_path / 'tff_meta' / 'pkg').mkdir(parents=True)
  (tmp_path / 'tff_meta' / 'pkg' / '__init__.py').write_text('X = 1\n')
  (tmp_path / 'tff_meta' / 'pkg' / 'a.py').write_text('from tff_meta.pkg import b\n')
  (tmp_path / 'tff_meta' / 'pkg' / 'b.py').write_text('def f():\n  from tff_meta.pkg import X\n')
  monkeypatch.setattr(reading_cost, 'REPO', tmp_path)
  assert reading_cost.closure(('tff_meta.pkg.a',)) == {
      'tff_meta.pkg.a': 1, 'tff_meta.pkg.b': 2, 'tff_meta.pkg': 1}
