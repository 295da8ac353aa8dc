"""tff_meta/core/fields.py: one declaration gives a key its flag, its help and its range error."""

from __future__ import annotations

import dataclasses
import functools
from typing import Tuple

import pytest
from absl import flags

from tff_meta.core import config_file, fields
from tff_meta.core.config_file import ConfigError
from tff_meta.core.fields import above, at_least, between, field, fraction, one_of
from tff_meta.core.registry import Registry

COLOURS = Registry('colour')
COLOURS.add('red', 1)


@dataclasses.dataclass
class Toy:
  rounds: int = field(3, 'Rounds.', at_least(1))
  rate: float = field(0.5, 'The rate.', above(0), symbol='beta')
  share: float = field(0.2, 'A share.', fraction())
  mix: float = field(0.0, 'A mix.', between(0, 1))
  kind: str = field('a', 'A kind.', one_of(('a', 'b', '')))
  colour: str = field('red', 'A colour.', one_of(COLOURS))
  sizes: Tuple[int, ...] = field((1,), 'Sizes.', fields.Check('sizes >= 1', lambda v: min(v) >= 1),
                                 item=int)
  free: float = field(1.0, 'Unchecked.')
  data: dict = config_file.table('A table.')


def _error(**values) -> str:
  with pytest.raises(ConfigError) as e:
    fields.check_fields(config_file.load(Toy, None, values), ConfigError)
  return str(e.value)


def test_the_declaration_gives_the_flag_and_its_help():
  values = flags.FlagValues()
  module = type('Flags', (), {'DEFINE_string': staticmethod(
      functools.partial(flags.DEFINE_string, flag_values=values))})
  config_file.define_flags(module, config_file.scalar_fields(Toy))
  assert values['rounds'].help == ('Rounds. Must be >= 1. Overrides the config (built-in '
                                   'default 3).')
  assert values['share'].help.startswith('A share. Must be in (0, 1). ')
  assert values['free'].help.startswith('Unchecked. Overrides')
  values(['prog', '--rounds=0'])
  overrides = config_file.overrides_from_flags(values, ['rounds'])
  with pytest.raises(ConfigError, match=r'^rounds must be >= 1, got 0\.$'):
    fields.check_fields(config_file.load(Toy, None, overrides), ConfigError)


def test_each_check_says_its_range():
  fields.check_fields(Toy(), ConfigError)   # the defaults are in range
  assert _error(rate='0') == 'rate (beta) must be > 0, got 0.0.'
  assert _error(share='1') == 'share must be in (0, 1), got 1.0.'
  assert _error(mix='1.5') == 'mix must be in [0, 1], got 1.5.'
  assert _error(kind='c') == "kind must be one of a, b, '', got 'c'."
  assert _error(sizes='2,0') == 'sizes must be sizes >= 1, got [2, 0].'
  assert _error(free='inf') == 'free must be a finite number, got inf.'
  assert _error(share='nan') == 'share must be a finite number, got nan.'


def test_a_registry_check_reads_the_registry_when_it_checks():
  assert _error(colour='blue') == "colour must be one of red, got 'blue'."
  COLOURS.add('blue', 2)
  try:
    fields.check_fields(Toy(colour='blue'), ConfigError)
  finally:
    COLOURS.remove('blue')


def test_a_prefix_names_the_table():
  with pytest.raises(ValueError, match=r'^hparams\.rounds must be >= 1, got -1\.$'):
    fields.check_fields(Toy(rounds=-1), ValueError, prefix='hparams.')
