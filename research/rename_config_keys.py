"""Renames old config keys in run folders, once: `meta_lr` -> `server_lr` and the like.

The config readers have no renamed-key shims: a key that was renamed (`OLD_KEYS`
below) is an unknown key to them.
A run folder written before the rename keeps old keys in its `config.toml`
and, for a few-round run, in the TOML string under `config` of its
`results.json`, which the report reads. This rewrites both, the key names
only (each value and every other byte stays), so the reports and a resumed
run read the folder as one written today.

  python -m research.rename_config_keys [FOLDER ...]   # default: docs/runs

It prints each file it rewrites; a second run rewrites nothing.
"""

from __future__ import annotations

import json
import os
import re
import sys

from tff_meta.core import files

# Keys renamed in the past, old name -> new name; only this script knows them.
OLD_KEYS = {'meta_lr': 'server_lr', 'meta_lr_decay_episode': 'server_lr_decay_episode',
            'meta_optimizer': 'server_optimizer'}

_OLD_KEY_LINE = re.compile(r'^(%s)(\s*=)' % '|'.join(map(re.escape, OLD_KEYS)), re.MULTILINE)


def renamed_toml(text: str) -> str:
  """TOML `text` with each top-level old key renamed (its line's value kept); the tables
  (`[data]`, ...) hold no config keys and are left as they are."""
  table = re.search(r'^\[', text, re.MULTILINE)
  end = table.start() if table else len(text)
  return _OLD_KEY_LINE.sub(lambda m: OLD_KEYS[m.group(1)] + m.group(2), text[:end]) + text[end:]


def renamed_results(text: str) -> str:
  """A results.json's text with the old keys of its `config` TOML string renamed; the JSON
  text is otherwise left as written."""
  config = json.loads(text).get('config')
  if not isinstance(config, str) or renamed_toml(config) == config:
    return text
  old, new = json.dumps(config), json.dumps(renamed_toml(config))
  if text.count(old) != 1:   # written with other escapes: say so rather than guess
    raise SystemExit(f'error: cannot find the config string of a results.json verbatim; '
                     f'rename its keys by hand ({", ".join(OLD_KEYS)}).')
  return text.replace(old, new)


def rewrite(folder: str) -> list:
  """Rewrites the config.toml and results.json files under `folder`; returns their paths."""
  changed = []
  for root, _, names in sorted(os.walk(folder)):
    for name, rename in (('config.toml', renamed_toml), ('results.json', renamed_results)):
      if name not in names:
        continue
      path = os.path.join(root, name)
      with open(path, encoding='utf-8') as f:
        text = f.read()
      new = rename(text)
      if new != text:
        files.write_text(path, new)
        changed.append(path)
  return changed


def main(argv) -> None:
  for folder in argv[1:] or ['docs/runs']:
    if not os.path.isdir(folder):
      raise SystemExit(f'error: {folder} is not a folder; give run folders (default docs/runs).')
    for path in rewrite(folder):
      print(f'renamed old keys in {path}')


if __name__ == '__main__':
  main(sys.argv)
