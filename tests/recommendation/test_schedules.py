"""`lr_schedule`: the outer rates' schedule, hand-computed, and the rate each episode's step gets
(MAML / Meta-SGD's server step and NN(pre-trained)'s pre-training step alike)."""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.core.config_file import ConfigError
from tff_meta.recommendation import config, methods, schedules

BASE, TOTAL = 0.01, 4
# cos(pi * (e - 1) / 4) for e = 1..4 is 1, sqrt(2) / 2, 0, -sqrt(2) / 2.
COSINE = [0.01, 0.01 * (1 + 0.5 ** 0.5) / 2, 0.005, 0.01 * (1 - 0.5 ** 0.5) / 2]


def test_cosine_and_constant_against_hand_computed_values():
  assert [schedules.rate('cosine', BASE, e, TOTAL) for e in range(1, 5)] == pytest.approx(COSINE)
  assert COSINE[1] == pytest.approx(0.0085355339) and COSINE[3] == pytest.approx(0.0014644661)
  assert [schedules.rate('constant', BASE, e, TOTAL) for e in range(1, 5)] == [BASE] * 4


def test_with_rate_sets_only_the_rate_of_a_real_adam_state():
  state = tff.learning.optimizers.build_adam(0.1).initialize(
      (tf.TensorSpec((2, 3), tf.float32),))
  new = schedules.with_rate(state, 0.025)
  assert float(new['learning_rate']) == pytest.approx(0.025)
  assert np.asarray(new['learning_rate']).dtype == np.asarray(state['learning_rate']).dtype
  assert float(state['learning_rate']) == pytest.approx(0.1)   # the input is not changed
  assert list(new) == list(state)
  for key in state:
    if key != 'learning_rate':
      np.testing.assert_array_equal(np.asarray(new[key], dtype=object),
                                    np.asarray(state[key], dtype=object))
  with pytest.raises(ValueError, match='learning_rate'):
    schedules.with_rate({'step': 0}, 0.1)


@pytest.mark.parametrize('name', ['cosine', 'constant'])
def test_bad_schedule_is_named_and_good_ones_pass(name):
  assert dataclasses.replace(config.RecommendConfig(), lr_schedule=name).validate()
  with pytest.raises(ConfigError, match='lr_schedule must be one of constant, cosine'):
    dataclasses.replace(config.RecommendConfig(), lr_schedule=name + 'x').validate()


def _cfg(tmp_path, schedule):
  return dataclasses.replace(config.RecommendConfig(), output_dir=str(tmp_path), episodes=TOTAL,
                             eval_every=TOTAL, checkpoint_every=TOTAL, server_lr=BASE,
                             lr_schedule=schedule).validate()


class _Model:
  initial_trainable = [np.zeros(2, np.float32)]
  num_parameters = 2


@pytest.mark.parametrize('schedule,expected', [('cosine', COSINE), ('constant', [BASE] * TOTAL)])
def test_pretraining_steps_get_the_scheduled_rate(tmp_path, schedule, expected):
  seen = []

  class Trainer:   # records the rate in the optimizer state each step receives
    learning_rate = BASE

    def initialize(self, weights):
      del weights
      return collections.OrderedDict(learning_rate=np.float32(BASE), step=np.int64(0))

    def run(self, weights, state, x, y, steps, seed):
      del x, y, steps, seed
      seen.append(float(state['learning_rate']))
      return weights, state

  methods.pretraining(_cfg(tmp_path, schedule), name='p', display='P', model=_Model(),
                      trainer=Trainer(), episodes=TOTAL, user_data=lambda e: (None, None),
                      evaluate=lambda w, users: {'rmse': 1.0}, test=[], curve_test=[],
                      show_progress=False)
  assert seen == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize('schedule,expected', [('cosine', COSINE), ('constant', [BASE] * TOTAL)])
def test_meta_steps_get_the_scheduled_server_rate(tmp_path, monkeypatch, schedule, expected):
  seen = []

  class Process:   # the FedMeta process's state layout; records the server rate of each round
    params_type = None

    def initialize(self):
      return collections.OrderedDict(
          params=collections.OrderedDict(weights=[np.zeros(2, np.float32)]),
          optimizer_state=collections.OrderedDict(learning_rate=np.float32(BASE)),
          round_num=np.int32(0))

    def next(self, state, batch):
      del batch
      seen.append(float(state['optimizer_state']['learning_rate']))
      return state, {}

  monkeypatch.setattr(methods.fedmeta, 'build_fedmeta_process', lambda *a, **k: Process())
  monkeypatch.setattr(methods.evaluation, 'build_predict', lambda *a, **k: lambda p, i: [])
  monkeypatch.setattr(methods.evaluation, 'prediction_inputs', lambda eps: None)
  methods.meta_learning(_cfg(tmp_path, schedule), name='m', display='M', variant='maml',
                        model=_Model(), loss=None, train_batch=lambda e: [], test=[],
                        curve_test=[], score=lambda preds, eps: {'rmse': 1.0},
                        show_progress=False)
  assert seen == pytest.approx(expected, rel=1e-6)
