"""tff_meta/core/config_file.py: TOML in and out of a config dataclass, and its flags."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import tomllib
from typing import Any, Dict, Tuple

import pytest
from absl import flags

from tff_meta.core import config_file
from tff_meta.core.config_file import ConfigError, table
from tff_meta.core.fields import at_least, field
from tff_meta.fewround import config as fewround_config
from tff_meta.recommendation import config as recommend_config


@dataclasses.dataclass
class Toy:
  name: str = field('toy', 'The name.')
  steps: int = field(3, 'Steps.', at_least(1))
  rate: float = field(0.5, 'The rate.')
  on: bool = field(False, 'Switch.')
  sizes: Tuple[int, ...] = field((1, 2), 'Sizes.', item=int)
  split: Tuple[float, ...] = field((0.5, 0.5), 'Split.')
  words: Tuple[str, ...] = field(('a',), 'Words.', item=str)
  listed: str = field('', lambda: 'Help made ' + 'late.')
  data: Dict[str, Any] = table('Loader options.')
  per: Dict[str, Dict[str, Any]] = table('Per-method values.', nested=True)


def _toy_file(tmp_path, text):
  path = tmp_path / 'toy.toml'
  path.write_text(text)
  return config_file.load(Toy, str(path))


def test_to_toml_writes_keys_then_tables():
  cfg = Toy(name='a "b" \\ c\n', steps=7, rate=1e-5, on=True, sizes=(3,), split=(0.8, 0.2),
            words=('x', 'y'), data={'path': '/d', 'n': 2}, per={'m1': {'lr': 0.1}})
  assert config_file.to_toml(cfg) == (
      'name = "a \\"b\\" \\\\ c\\u000a"\nsteps = 7\nrate = 1e-05\non = true\nsizes = [3]\n'
      'split = [0.8, 0.2]\nwords = ["x", "y"]\nlisted = ""\n'
      '\n[data]\npath = "/d"\nn = 2\n'
      '\n[per.m1]\nlr = 0.1\n')


@pytest.mark.parametrize('cfg', [
    Toy(),
    Toy(name='naïve "quoted" \\ tab\there', steps=-4, rate=math.inf, on=True, sizes=(),
        split=(0.25, 0.75), words=('x y', 'z'), listed='a,b',
        data={'cache_dir': '/tmp/x', 'odd key': [1, 2], 'nested': {'a': True}},
        per={'fedavg': {'client_lr': 0.5}, 'maml': {}}),
])
def test_round_trip_gives_the_dataclass_back(tmp_path, cfg):
  again = _toy_file(tmp_path, config_file.to_toml(cfg))
  # An empty [per.maml] table has no lines, so it reads back as an empty table too.
  assert again == cfg


def test_round_trip_of_the_few_round_and_recommendation_configs(tmp_path):
  few = fewround_config.load('configs/fewround/femnist62_5way_iid.toml',
                             {'n_way': '3,7', 'iid': 'false'})
  few = dataclasses.replace(few, data={'cache_dir': '/data/tff'})
  path = tmp_path / 'few.toml'
  path.write_text(config_file.to_toml(few))
  assert fewround_config.load(str(path)) == few and few.data and few.model_options
  rec = recommend_config.load('configs/recommend/service_p80.toml', {'sort_log': 'true'})
  path = tmp_path / 'rec.toml'
  path.write_text(config_file.to_toml(rec))
  assert tomllib.loads(path.read_text())['sort_log'] is True
  assert recommend_config.load(str(path)) == rec


def test_unknown_key_lists_the_known_ones(tmp_path):
  with pytest.raises(ConfigError, match=r"toy.toml: unknown key 'stepz'; valid keys: "
                     r"\['data', 'listed', 'name', 'on', 'per', 'rate', 'sizes', 'split', "
                     r"'steps', 'words'\]\.$"):
    _toy_file(tmp_path, 'stepz = 3\n')


@pytest.mark.parametrize('text, match', [
    ('steps = "many"\n', "steps: expected a int, got 'many'"),
    ('steps = 2.5\n', 'steps: expected a int, got 2.5'),
    ('steps = true\n', 'steps: expected a int, got True'),
    ('rate = [1]\n', 'rate: expected a float'),
    ('on = "maybe"\n', r"on: expected a bool \(true or false\), got 'maybe'"),
    ('on = 2\n', r'on: expected a bool \(true or false\), got 2'),
    ('sizes = ["a"]\n', 'sizes: expected a tuple'),
    ('data = 3\n', r'data: expected a \[data\] table, got 3'),
    ('name = { a = 1 }\n', 'name: expected a str'),
])
def test_bad_types_name_the_key(tmp_path, text, match):
  with pytest.raises(ConfigError, match=match):
    _toy_file(tmp_path, text)


def test_values_read_as_flags_and_toml_alike(tmp_path):
  cfg = config_file.load(Toy, None, {'steps': '4', 'on': 'yes', 'sizes': '5, 6', 'split': 0.3,
                                     'words': 'p,q', 'listed': None})
  assert (cfg.steps, cfg.on, cfg.sizes, cfg.split, cfg.words) == (4, True, (5, 6), (0.3,),
                                                                   ('p', 'q'))
  assert _toy_file(tmp_path, 'listed = ["a", "b"]\nsteps = 4.0\n').listed == 'a,b'


def test_an_unknown_key_lists_the_valid_ones(tmp_path):
  with pytest.raises(ConfigError, match=r"toy.toml: unknown key 'meta_lr'; valid keys: \["):
    _toy_file(tmp_path, 'meta_lr = 0.1\n')
  with pytest.raises(ConfigError, match=r"<flags>: unknown key 'old_rate'; valid keys: \["):
    config_file.load(Toy, None, {'old_rate': '0.1'})


def test_missing_malformed_or_folder_file(tmp_path):
  with pytest.raises(ConfigError, match=r"'/nope.toml' does not exist; see configs/x/\."):
    config_file.load_toml('/nope.toml', see='configs/x/')
  with pytest.raises(ConfigError, match='malformed TOML'):
    _toy_file(tmp_path, 'steps = [\n')
  with pytest.raises(ConfigError, match='is a folder'):
    config_file.load_toml(str(tmp_path))


def test_shipped_configs_by_name_folder_or_file_name(tmp_path, monkeypatch):
  root = config_file.shipped_configs_folder()
  maml = os.path.join(root, 'fedmeta', 'table2_femnist_p20_maml.toml')
  for name in ('fedmeta/table2_femnist_p20_maml', 'table2_femnist_p20_maml',
               'configs/fedmeta/table2_femnist_p20_maml.toml', 'fedmeta/table2_femnist_p20_maml.toml'):
    assert os.path.samefile(config_file.resolve_config(name), maml), name
  monkeypatch.chdir(tmp_path)   # outside the checkout, its relative paths still resolve
  assert config_file.resolve_config('demo') == os.path.join(root, 'demo', 'digits.toml')
  assert config_file.resolve_config('configs/demo/digits.toml') == os.path.join(
      root, 'demo', 'digits.toml')
  assert config_file.load_toml('demo')['dataset'] == 'digits'
  (tmp_path / 'demo').write_text('dataset = "mine"\n')   # a file by that name wins
  assert config_file.load_toml('demo') == {'dataset': 'mine'}
  with pytest.raises(ConfigError, match=r"'digits' does not exist, nor is it the name of one shipped "
                                        r"config; it could be: demo/digits, privacy/digits"):
    config_file.resolve_config('digits')   # two folders have one
  with pytest.raises(ConfigError) as e:
    config_file.load_toml('tabel2_femnist_p20_mal')
  assert 'fedmeta/table2_femnist_p20_maml' in str(e.value) and '`tff-meta configs`' in str(e.value)
  assert config_file.resolve_config('/nope.toml') == '/nope.toml'   # a path stays a path


class _Flags:
  """The absl flags module, defining into its own FlagValues."""

  def __init__(self):
    self.values = flags.FlagValues()
    # pylint: disable-next=invalid-name
    self.DEFINE_string = functools.partial(flags.DEFINE_string, flag_values=self.values)


def test_flags_come_from_the_fields():
  module = _Flags()
  config_file.define_flags(module, config_file.scalar_fields(Toy))
  values = module.values
  assert 'data' not in values and 'per' not in values        # tables have no flag
  assert values['rate'].help == 'The rate. Overrides the config (built-in default 0.5).'
  assert values['listed'].help.startswith('Help made late.')
  names = [f.name for f in config_file.scalar_fields(Toy)]
  values(['prog', '--steps=9', '--on=false'])
  assert config_file.overrides_from_flags(values, names) == {'steps': '9', 'on': 'false'}
  assert config_file.load(Toy, None, config_file.overrides_from_flags(values, names)).on is False
  assert values['steps'].help == ('Steps. Must be >= 1. Overrides the config (built-in '
                                  'default 3).')


def test_key_defaults_give_the_scalar_fields_defaults_as_written_and_as_toml_reads_them():
  assert config_file.key_defaults(Toy, prefix='toy.') == {
      'toy.name': 'toy', 'toy.steps': 3, 'toy.rate': 0.5, 'toy.on': False, 'toy.sizes': (1, 2),
      'toy.split': (0.5, 0.5), 'toy.words': ('a',), 'toy.listed': ''}
  as_read = config_file.key_defaults(Toy, tuples_as_lists=True)
  assert 'data' not in as_read and as_read['sizes'] == [1, 2]
  # what an old few-round config.toml lacks is filled from this: it must read back as written
  defaults = fewround_config.toml_defaults()
  written = tomllib.loads(config_file.to_toml(fewround_config.FewRoundConfig()))
  assert {k: written[k] for k in defaults} == defaults
