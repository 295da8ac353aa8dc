"""Bytes per round, checked by hand for logistic regression on 8x8 digits (10 classes)."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_meta.algorithms import ALGORITHMS, Hparams
from tff_meta.evaluation import communication
from tff_meta.models import build_model_spec

CLIENTS = 7
FLOAT = 4                          # bytes per float32
PARAMS = 8 * 8 * 10 + 10           # kernel [64, 10] + bias [10] = 650
# What each client sends up besides its weighted update: weight, the 3 metric sums
# (loss_sum, correct, num_examples), num_clients and num_rejected.
EXTRA_FLOATS = 1 + 3 + 1 + 1


@pytest.fixture(scope='module')
def model():
  return build_model_spec('logistic_regression', (8, 8), 10)


def test_tiny_model_has_the_expected_parameters(model):
  assert model.num_parameters == PARAMS
  assert [w.shape for w in model.initial_trainable] == [(64, 10), (10,)]


@pytest.mark.slow
@pytest.mark.parametrize('name, params_factor', [
    ('fedavg', 1), ('fedavg_meta', 1), ('fedmeta_maml', 1), ('fedmeta_fomaml', 1),
    ('fedmeta_metasgd', 2),        # Meta-SGD broadcasts and returns alpha too
])
def test_round_bytes_by_hand(model, name, params_factor):
  alg = ALGORITHMS.get(name)(model, Hparams())
  floats_down = params_factor * PARAMS
  floats_up = params_factor * PARAMS + EXTRA_FLOATS
  assert communication.round_bytes(alg.process, CLIENTS) == {
      'bytes_down': floats_down * FLOAT * CLIENTS,
      'bytes_up': floats_up * FLOAT * CLIENTS,
  }


def test_hand_numbers():
  """The numbers above, written out: FedAvg 2600 B down / 2624 B up per client."""
  assert PARAMS * FLOAT == 2600 and (PARAMS + EXTRA_FLOATS) * FLOAT == 2624
  assert 2 * PARAMS * FLOAT == 5200 and (2 * PARAMS + EXTRA_FLOATS) * FLOAT == 5224


def test_type_num_bytes():
  struct = tff.StructType([('a', tff.TensorType(np.float32, [3, 4])),
                           ('b', tff.TensorType(np.int64, [2])),
                           ('c', tff.TensorType(np.float32))])
  assert communication.type_num_bytes(struct) == 12 * 4 + 2 * 8 + 4
  assert communication.type_num_bytes(tff.FederatedType(struct, tff.CLIENTS)) == 68
  with pytest.raises(ValueError, match='unknown shape'):
    communication.type_num_bytes(tff.TensorType(np.float32, [None, 3]))
