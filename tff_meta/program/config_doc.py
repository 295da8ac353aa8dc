"""docs/CONFIG.md's tables of defaults and ranges, made from the config keys' declarations.

Each section of docs/CONFIG.md (training, few-round, recommendation) ends in a
table of every key with its default and its range, between two marker lines;
`write` fills them from the fields (`tff_meta.core.fields.field`), so the doc's
numbers cannot drift from the code. tests/test_docs.py checks they are current.

  python -m tff_meta.program.config_doc --write   # rewrites the tables in docs/CONFIG.md
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import Callable, Dict, Iterable, List

from tff_meta.core import config_file, files
from tff_meta.core.fields import check_of
from tff_meta.fewround import config as fewround_config
from tff_meta.classification import config as train_config
from tff_meta.recommendation import config as recommend_config

CONFIG_DOC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, 'docs', 'CONFIG.md')

# Table name -> (key prefix, fields) pairs, in the order the table lists them.
TABLES: Dict[str, Callable[[], List]] = {
    'training': lambda: [('', config_file.scalar_fields(train_config.ExperimentConfig)),
                         ('[hparams] ', dataclasses.fields(train_config.Hparams))],
    'few-round': lambda: [('', config_file.scalar_fields(fewround_config.FewRoundConfig))],
    'recommendation': lambda: [('', config_file.scalar_fields(recommend_config.RecommendConfig))],
}


def _cell(text: str) -> str:
  return text.replace('|', '\\|')


def table(groups: Iterable) -> str:
  """The markdown table of `groups`' keys: default (as TOML writes it) and range."""
  rows = ['| key | default | must be |', '|---|---|---|']
  for prefix, fields in groups:
    for f in fields:
      check = check_of(f)
      default = config_file.toml_value(config_file.default_of(f))
      rows.append(f'| `{prefix}{f.name}` | `{_cell(default)}` | '
                  f'{_cell(check.text()) if check else ""} |')
  return '\n'.join(rows)


def _markers(name: str):
  return (f'<!-- keys of the {name} config: python -m tff_meta.program.config_doc --write -->',
          f'<!-- end of the {name} keys -->')


def render(text: str) -> str:
  """`text` (docs/CONFIG.md) with each table between its markers made afresh."""
  for name, groups in TABLES.items():
    start, end = _markers(name)
    pattern = re.compile(re.escape(start) + r'\n.*?' + re.escape(end), re.DOTALL)
    if len(pattern.findall(text)) != 1:
      raise ValueError(f'docs/CONFIG.md needs one pair of lines "{start}" ... "{end}".')
    text = pattern.sub(lambda _: f'{start}\n{table(groups())}\n{end}', text)
  return text


def main(argv) -> None:
  with open(CONFIG_DOC, encoding='utf-8') as f:
    text = f.read()
  new = render(text)
  if '--write' in argv[1:]:
    files.write_text(CONFIG_DOC, new)
  elif new != text:
    raise SystemExit('error: docs/CONFIG.md\'s key tables are not current; run '
                     'python -m tff_meta.program.config_doc --write')


if __name__ == '__main__':
  main(sys.argv)
