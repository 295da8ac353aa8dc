"""docs/CONFIG.md documents every key of the three kinds of config, each in its own section."""

import dataclasses
import os

import pytest

from tests.conftest import REPO
from tff_meta.fewround import config as fewround_config
from tff_meta.classification import config as train_config
from tff_meta.program import config_doc
from tff_meta.recommendation import config as recommend_config

CONFIG_DOC = os.path.join(REPO, 'docs', 'CONFIG.md')

SECTIONS = {
    '## Training configs': lambda: list(train_config.TOP_LEVEL) + list(train_config.HPARAMS),
    '## Few-round learning configs': lambda: [
        f.name for f in dataclasses.fields(fewround_config.FewRoundConfig)],
    '## Recommendation configs': lambda: list(recommend_config.FIELDS),
}


def _section(heading: str) -> str:
  with open(CONFIG_DOC, encoding='utf-8') as f:
    text = f.read()
  assert text.count(heading) == 1, f'docs/CONFIG.md needs one section "{heading}"'
  return text.split(heading)[1].split('\n## ')[0]


def _documented(key: str, section: str) -> bool:
  # `key`, `[key]` (a table), `[hparams] key`, or `key, ...` in a row naming several keys.
  return any(form in section for form in (f'`{key}`', f'`[{key}]`', f' {key}`', f'{key},'))


@pytest.mark.parametrize('heading', sorted(SECTIONS))
def test_config_doc_documents_every_key(heading):
  section = _section(heading)
  missing = [k for k in SECTIONS[heading]() if not _documented(k, section)]
  assert not missing, f'docs/CONFIG.md, "{heading}", does not document config keys {missing}'


def test_the_check_sees_a_missing_key():
  assert not _documented('resident_state', '| `rounds_per_call` | ... |')
  assert _documented('server_lr', '| `[hparams] server_optimizer`, `server_lr` | ... |')
  assert _documented('data', '| `[data]` | loader options |')


def test_config_doc_tables_of_defaults_and_ranges_are_current():
  # made from the declarations: python -m tff_meta.program.config_doc --write
  with open(CONFIG_DOC, encoding='utf-8') as f:
    text = f.read()
  assert config_doc.render(text) == text, 'run python -m tff_meta.program.config_doc --write'
  assert '| `rounds` | `100` | >= 1 |' in text
  assert '| `[hparams] batch_size` | `10` | >= 1 |' in text
  stale = text.replace('| `rounds` | `100` | >= 1 |', '| `rounds` | `100` | >= 2 |', 1)
  assert config_doc.render(stale) != stale   # the check sees a stale row
