"""The model split shared by FedPer, LG-FedAvg, FedRep and FedMeta+FedPer."""

import numpy as np
import pytest

from tests import helpers
from tff_meta.models import split


@pytest.fixture(scope='module')
def model():
  return helpers.mlp_spec()   # Dense(16) -> Dense(10): weights w1, b1, w2, b2


def test_last_layer_is_personal(model):
  s = split.resolve(model, '-1')
  assert s.personal == (2, 3) and s.shared == (0, 1)
  assert split.resolve(model, '1') == s


def test_layer_name_selects_the_same_layer(model):
  name = model.weight_layers[2][1]
  assert split.resolve(model, name) == split.resolve(model, '-1')


def test_flip_makes_the_selection_shared(model):
  s = split.resolve(model, '-1', flip=True)
  assert s.shared == (2, 3) and s.personal == (0, 1)


def test_merge_inverts_take(model):
  s = split.resolve(model, '0')
  w = model.initial_trainable
  merged = s.merge(s.take_shared(w), s.take_personal(w))
  assert all(np.array_equal(a, b) for a, b in zip(merged, w))


@pytest.mark.parametrize('selectors, message', [
    ('5', 'names no layer'),
    ('no_such_layer', "'no_such_layer' names no layer"),
    ('', 'personal_layers is empty'),
    ('0,1', 'leaves no shared layer'),
])
def test_bad_split_is_named(model, selectors, message):
  with pytest.raises(ValueError, match=message):
    split.resolve(model, selectors)
