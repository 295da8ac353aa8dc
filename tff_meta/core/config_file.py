"""Config files: TOML read into a dataclass, written back, and one override flag per key.

The three kinds of config (training: `classification/config.py`, few-round:
`fewround/config.py`, recommendation: `recommendation/config.py`) are
dataclasses whose fields carry their help text and range (`fields.field`,
`table`), so the flags, their help, the range errors and docs/CONFIG.md follow
from one declaration. This module holds what they share:

- `load_toml`: the file, a one-line `ConfigError` when it is missing or bad;
- `coerce_value` / `coerce_dataclass`: each value as its field's type, an
  unknown key an error that lists the known ones;
- `to_toml`: the one TOML writer (each run's `config.toml`);
- `define_flags` / `overrides_from_flags`: a string flag per key, read by the
  same coercion as a file's value, so `--x=v` means what `x = v` means.

It imports neither TensorFlow nor the rest of the package.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

from tff_meta.core.fields import help_of, range_help

class ConfigError(ValueError):
  """A config value that is wrong; the message names the key and the fix."""


def table(help: str, factory: Callable[[], Any] = dict,  # pylint: disable=redefined-builtin
          nested: bool = False):
  """A `[name]` table of the config file (a dict, or a dataclass `factory` makes).

  `nested`: a dict of tables, written as `[name.key]` sub-tables.
  """
  return dataclasses.field(default_factory=factory,
                           metadata={'help': help, 'table': True, 'nested': nested})


def default_of(field: dataclasses.Field) -> Any:
  return field.default if field.default is not dataclasses.MISSING else field.default_factory()


def is_table(field: dataclasses.Field) -> bool:
  return bool(field.metadata.get('table'))


def scalar_fields(cls) -> List[dataclasses.Field]:
  """The fields of config class `cls` that are top-level keys (not tables): one flag each."""
  return [f for f in dataclasses.fields(cls) if not is_table(f)]


def key_defaults(cls, prefix: str = '', tuples_as_lists: bool = False) -> Dict[str, Any]:
  """Key -> default for the scalar fields of config class `cls`, each key `prefix` + name.

  A config.toml written before a key existed meant the key's default, so the
  readers of old run folders (the reports, the few-round rerun check) fill
  missing keys from this. `tuples_as_lists` gives tuples as TOML reads them back.
  """
  as_read = (lambda v: list(v) if isinstance(v, tuple) else v) if tuples_as_lists else (lambda v: v)
  return {prefix + f.name: as_read(default_of(f)) for f in scalar_fields(cls)}


def shipped_configs_folder() -> str:
  """The configs shipped with tff_meta: `tff_meta/configs` in an installed wheel (setup.py),
  else the checkout's `configs/`."""
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tff_meta/
  installed = os.path.join(package, 'configs')
  return installed if os.path.isdir(installed) else os.path.join(os.path.dirname(package), 'configs')


def shipped_configs() -> Dict[str, str]:
  """Name -> path of every shipped config; the name is its path in the configs folder without
  `.toml`, e.g. 'demo/digits', 'fedmeta/table2_femnist_p20_maml'."""
  root, names = shipped_configs_folder(), {}
  for folder, _, files in os.walk(root):
    for file in files:
      if file.endswith('.toml'):
        path = os.path.join(folder, file)
        names[os.path.relpath(path, root)[:-len('.toml')].replace(os.sep, '/')] = path
  return dict(sorted(names.items()))


def resolve_config(path: str) -> str:
  """`path` if it exists, else the shipped config it names: 'demo/digits' (also written
  'configs/demo/digits.toml', the repository path), a folder holding one config ('demo'), or
  a file name found once ('table2_femnist_p20_maml'). A relative path that names none is a
  ConfigError listing the near names; an absolute one stays as it is (load_toml's error)."""
  if os.path.exists(path) or os.path.isabs(path):
    return path
  names = shipped_configs()
  key = path.replace(os.sep, '/').removeprefix('./').removeprefix('configs/')
  key = key.removesuffix('.toml').rstrip('/')
  matches = ([key] if key in names else
             [n for n in names if n.startswith(key + '/')] or
             [n for n in names if n.rsplit('/', 1)[-1] == key])
  if len(matches) == 1:
    return names[matches[0]]
  import difflib  # pylint: disable=g-import-not-at-top
  near = matches or difflib.get_close_matches(key, names, n=6, cutoff=0.6) or [
      n for n in names if key.rsplit('/', 1)[-1] in n][:6]
  raise ConfigError(
      f'Config file {path!r} does not exist, nor is it the name of one shipped config'
      + (f'; it could be: {", ".join(near[:6])}{", ..." if len(near) > 6 else ""}' if near else '')
      + f' (`tff-meta configs` lists the {len(names)} shipped configs; give a name or a path).')


def load_toml(path: str, see: str = 'configs/ for examples') -> Dict[str, Any]:
  """A TOML file (a path, or a shipped config's name: `resolve_config`) as a dict; a missing
  (`see` names where configs are) or malformed file, or a folder, is a ConfigError."""
  path = resolve_config(path)
  if not os.path.exists(path):
    raise ConfigError(f'Config file {path!r} does not exist; see {see}.')
  try:
    with open(path, 'rb') as f:
      return tomllib.load(f)
  except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
    raise ConfigError(f'{path}: malformed TOML: {e}') from None
  except IsADirectoryError:
    raise ConfigError(f'Config {path!r} is a folder; give a .toml file (see {see}).') from None


_BOOL_WORDS = {'true': True, '1': True, 'yes': True, 'on': True,
               'false': False, '0': False, 'no': False, 'off': False}


def coerce_value(field: dataclasses.Field, value: Any, where: str) -> Any:
  """`value` as the type of `field`'s default; a ConfigError names `where` if it is not one.

  Flags arrive as strings, files as TOML values: a bool takes true/false (also
  1/0, yes/no, on/off), a tuple a list, a comma-separated string or one
  value, a str a string or a list (joined by commas), a table a dict.
  """
  default = default_of(field)
  if isinstance(default, dict):
    if not isinstance(value, dict):
      raise ConfigError(f'{where}: expected a [{field.name}] table, got {value!r}.')
    return dict(value)
  try:
    if isinstance(default, bool):
      if isinstance(value, str):   # bool('false') would be True
        return _BOOL_WORDS[value.strip().lower()]
      if value not in (0, 1):
        raise ValueError
      return bool(value)
    if isinstance(default, tuple):
      if isinstance(value, str):
        value = [v.strip() for v in value.split(',') if v.strip()]
      elif not isinstance(value, (list, tuple)):
        value = [value]
      item = field.metadata.get('item', float)
      return tuple(_scalar(item, v) for v in value)
    if isinstance(default, str) and isinstance(value, list):
      return ','.join(str(v) for v in value)
    return _scalar(type(default), value)
  except (KeyError, TypeError, ValueError):
    kind = 'bool (true or false)' if isinstance(default, bool) else type(default).__name__
    raise ConfigError(f'{where}: expected a {kind}, got {value!r}.') from None


def _scalar(kind: type, value: Any) -> Any:
  """`value` as an int, float or str; a TOML bool, table or array is none of them."""
  if isinstance(value, (bool, dict, list)):
    raise ValueError
  if kind is int and isinstance(value, float) and not value.is_integer():
    raise ValueError
  return kind(value)


def unknown_key(where: str, key: str, known: Iterable[str], more: str = '') -> ConfigError:
  """The error for a key no field has: it lists the known keys."""
  return ConfigError(f'{where}: unknown key {key!r}; valid keys: {sorted(known)}{more}.')


def coerce_dataclass(cls, raw: Mapping[str, Any], source: str = '<dict>'):
  """`cls(**raw)` for a config dataclass, each value coerced to its field's type.

  An unknown key or a bad value raises a ConfigError naming `source` and the
  key.
  """
  fields = {f.name: f for f in dataclasses.fields(cls)}
  kwargs = {}
  for key, value in raw.items():
    if key not in fields:
      raise unknown_key(source, key, fields)
    kwargs[key] = coerce_value(fields[key], value, f'{source}: {key}')
  return cls(**kwargs)


def load(cls, path: Optional[str], overrides: Optional[Mapping[str, Any]] = None,
         see: str = 'configs/'):
  """Config class `cls` from a TOML file (None = the defaults), overridden by `overrides`
  (flag values, None = not given)."""
  raw: Dict[str, Any] = load_toml(path, see=see) if path else {}
  raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
  return coerce_dataclass(cls, raw, source=path or '<flags>')


def to_toml(cfg) -> str:
  """Config dataclass `cfg` as TOML: its keys in field order, then its tables.

  `load` of the text gives `cfg` back (tests/test_config_file.py).
  """
  lines, tables = [], []
  for field in dataclasses.fields(cfg):
    value = getattr(cfg, field.name)
    if not is_table(field):
      lines.append(f'{_key(field.name)} = {toml_value(value)}')
    elif field.metadata.get('nested'):
      tables += [(f'{field.name}.{_key(k)}', v) for k, v in value.items()]
    else:
      tables.append((field.name, dataclasses.asdict(value) if dataclasses.is_dataclass(value)
                     else value))
  for name, values in tables:
    lines.append(f'\n[{name}]')
    lines.extend(f'{_key(k)} = {toml_value(v)}' for k, v in values.items())
  return '\n'.join(lines) + '\n'


def _key(key: str) -> str:
  bare = key and all(c.isascii() and (c.isalnum() or c in '_-') for c in key)
  return key if bare else _string(key)


def _string(text: str) -> str:
  text = text.replace('\\', '\\\\').replace('"', '\\"')
  return '"' + ''.join(c if c >= ' ' and c != '\x7f' else f'\\u{ord(c):04x}' for c in text) + '"'


def toml_value(value: Any) -> str:
  if isinstance(value, bool):
    return 'true' if value else 'false'
  if isinstance(value, (int, float)):
    return repr(value)   # inf and nan are TOML too
  if isinstance(value, (list, tuple)):
    return '[' + ', '.join(toml_value(v) for v in value) + ']'
  if isinstance(value, dict):
    return '{' + ', '.join(f'{_key(k)} = {toml_value(v)}' for k, v in value.items()) + '}'
  return _string(str(value))


def define_flags(flags_module, fields: Iterable[dataclasses.Field],
                 describe: Callable[[dataclasses.Field], str] = help_of) -> None:
  """One string flag per field (a config key), its help from the field: text and range."""
  for field in fields:
    flags_module.DEFINE_string(field.name, None, f'{describe(field)}{range_help(field)} '
                               f'Overrides the config (built-in default {default_of(field)!r}).')


def overrides_from_flags(flag_values, names: Iterable[str]) -> Dict[str, Any]:
  """The flags among `names` the user gave, by name."""
  return {n: getattr(flag_values, n) for n in names if getattr(flag_values, n) is not None}
