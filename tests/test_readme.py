"""README.md tells the truth: its catalog table is the registries', its links stay inside the
repository, and it and docs/ARCHITECTURE.md stay within their line caps.

The table between the catalog markers is regenerated from the registries
(`tff_meta.catalog`) and compared with the README, so a new algorithm,
dataset or model cannot be left out. The repository's address is set once,
in pyproject.toml, and the notebook and the Colab badge must use that one.
"""

import json
import os
import re
import tomllib

import pytest

from tests.conftest import REPO
from tff_meta import catalog
from tff_meta.algorithms import ALGORITHMS
from tff_meta.data import DATASETS
from tff_meta.models import MODELS
from tff_meta.core.registry import Registry

README = os.path.join(REPO, 'README.md')


def _readme() -> str:
  with open(README, encoding='utf-8') as f:
    return f.read()


def test_the_readme_table_is_generated_from_the_registries():
  text = _readme()
  assert catalog.replace_table(text, catalog.table()) == text, (
      'README.md\'s table is out of date: run `python -m tff_meta.catalog --write`')
  block = text.split(catalog.BEGIN)[1].split(catalog.END)[0]
  for kind, registry in (('algorithm', ALGORITHMS), ('dataset', DATASETS), ('model', MODELS)):
    listed = re.findall(rf'^\| {kind} \| `([^`]+)` \|', block, re.MULTILINE)
    assert listed == [n for n in registry.names() if not n.startswith('_')], kind


def test_a_new_registry_entry_gets_a_row():
  fake = Registry('model')

  def build_tiny(element_shape, num_classes):
    """A tiny model for this test.

    More text that is not in the table.
    """

  fake.add('tiny', build_tiny)
  fake.add('bare', lambda shape, n: None)
  assert catalog.table({'model': fake}).splitlines()[2:] == [
      '| model | `bare` | (no description yet: add one in tff_meta/catalog.py) | — |',
      '| model | `tiny` | A tiny model for this test | — |',
  ]


def test_replace_table_needs_both_markers_once():
  text = f'a\n{catalog.BEGIN}\nold\n{catalog.END}\nb\n'
  assert catalog.replace_table(text, 'new') == f'a\n{catalog.BEGIN}\nnew\n{catalog.END}\nb\n'
  for broken in ('no markers', f'{catalog.END}\n{catalog.BEGIN}', text + catalog.BEGIN):
    with pytest.raises(ValueError, match='catalog markers'):
      catalog.replace_table(broken, 'new')


def test_catalog_check_exits_non_zero_on_a_stale_readme(tmp_path, monkeypatch, capsys):
  stale = tmp_path / 'README.md'
  stale.write_text(f'x\n{catalog.BEGIN}\n| old |\n{catalog.END}\n', encoding='utf-8')
  monkeypatch.setattr(catalog, 'README', str(stale))
  assert catalog.main(['--check']) == 1
  assert 'out of date' in capsys.readouterr().err
  assert catalog.main(['--write']) == 0
  assert catalog.main(['--check']) == 0
  assert catalog.table() in stale.read_text(encoding='utf-8')


def test_the_repository_address_is_set_once_and_used_everywhere():
  with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
    url = tomllib.load(f)['project']['urls']['Repository']
  assert re.fullmatch(r'https://github\.com/[\w.-]+/[\w.-]+', url), url
  with open(os.path.join(REPO, 'notebooks', 'quickstart.ipynb'), encoding='utf-8') as f:
    cells = json.load(f)['cells']
  settings = [''.join(c['source']) for c in cells if 'REPO_URL = ' in ''.join(c['source'])]
  assert len(settings) == 1 and f"REPO_URL = '{url}'" in settings[0]
  badge = re.search(r'\]\((https://colab\.research\.google\.com/github/[^)]+)\)', _readme())
  assert badge, 'README.md has no Colab badge'
  owner_repo = url.removeprefix('https://github.com/')
  assert badge.group(1) == (f'https://colab.research.google.com/github/{owner_repo}'
                            '/blob/main/notebooks/quickstart.ipynb')


def test_the_readme_and_architecture_are_short():
  # The house caps (README <= 180 lines, docs/ARCHITECTURE.md <= 250), as RESULTS.md <= 600.
  for path, cap in ((README, 180), (os.path.join(REPO, 'docs', 'ARCHITECTURE.md'), 250)):
    with open(path, encoding='utf-8') as f:
      lines = len(f.read().splitlines())
    assert lines <= cap, f'{os.path.relpath(path, REPO)}: {lines} lines, over its cap of {cap}'


def test_the_readme_stays_inside_the_repository():
  text = _readme()
  assert '../' not in text and '/work/' not in text, 'README.md points outside the repository'
  # Every repository path it names in backticks exists.
  for path in re.findall(r'`((?:docs|notebooks|configs|programs|tests|tff_meta)/[\w./-]+)`', text):
    assert os.path.exists(os.path.join(REPO, path)), path
  # Every paper it cites by short name in the table has a row in the paper list.
  papers = text.split('## Papers')[1]
  for source in {s.strip() for row in catalog.rows() for s in row[3].split(',')} - {'—'}:
    assert f'| {source} |' in papers, source
