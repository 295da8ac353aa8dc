"""tff_meta/core/registry.py: names to builders, with errors that list the known names."""

import pytest

from tff_meta.core.registry import Registry, UnknownNameError


def test_add_get_remove():
  reg = Registry('widget')
  reg.add('b', 2)
  reg.add('a', 1)
  assert reg.get('a') == 1 and reg.names() == ['a', 'b'] and list(reg) == ['a', 'b']
  with pytest.raises(ValueError, match="widget 'a' is registered twice"):
    reg.add('a', 3)
  reg.remove('a')
  assert 'a' not in reg and reg.names() == ['b']
  reg.add('a', 3)   # a removed name can be registered again
  assert reg.get('a') == 3


def test_an_unknown_name_lists_the_known_ones():
  reg = Registry('widget')
  reg.add('fedavg', 1)
  with pytest.raises(UnknownNameError) as error:
    reg.get('fedavgg')
  assert str(error.value) == ("Unknown widget 'fedavgg'. Did you mean 'fedavg'? "
                              'Known widgets: fedavg.')
