"""Per-tensor step multiples (`learning.step_scale`) against hand-computed SGD and Adam steps."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.learning import step_scale


def _step(optimizer, weights, grads):
  specs = tf.nest.map_structure(lambda w: tf.TensorSpec(np.shape(w), tf.float32), weights)
  state = optimizer.initialize(specs)
  return optimizer.next(state, tf.nest.map_structure(tf.constant, weights),
                        tf.nest.map_structure(tf.constant, grads))


def test_sgd_step_times_its_scale():
  w = (np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32))
  g = (np.array([0.5, -1.0], np.float32), np.array([2.0], np.float32))
  sgd = tff.learning.optimizers.build_sgdm(learning_rate=0.1)
  _, out = _step(step_scale.ScaledSteps(sgd, (1.0, 10.0)), w, g)
  np.testing.assert_allclose(out[0].numpy(), [0.95, 2.1], rtol=1e-6)      # w - 0.1 g
  np.testing.assert_allclose(out[1].numpy(), [3.0 - 10 * 0.1 * 2.0], rtol=1e-6)


def test_adam_first_step_is_scale_times_rate_per_coordinate():
  # Adam's bias-corrected first step is lr * g / (|g| + eps') ~ lr * sign(g), whatever |g|.
  w = (np.zeros([3], np.float32),)
  g = (np.array([1e-3, -5.0, 2.0], np.float32),)
  adam = tff.learning.optimizers.build_adam(learning_rate=0.01, epsilon=1e-12)
  _, plain = _step(adam, w, g)
  _, scaled = _step(step_scale.ScaledSteps(adam, (0.5,)), w, g)
  np.testing.assert_allclose(plain[0].numpy(), [-0.01, 0.01, -0.01], rtol=1e-4)
  np.testing.assert_allclose(scaled[0].numpy(), [-0.005, 0.005, -0.005], rtol=1e-4)


def test_mapping_scales_name_some_keys_only():
  # FedMeta's params: {'weights': [...], 'rates': [...]}; scales for 'weights' leave 'rates'
  # stepping as the optimizer steps them.
  w = collections.OrderedDict(weights=[np.ones([2], np.float32)],
                              rates=[np.ones([2], np.float32)])
  g = collections.OrderedDict(weights=[np.ones([2], np.float32)],
                              rates=[np.ones([2], np.float32)])
  sgd = tff.learning.optimizers.build_sgdm(learning_rate=0.1)
  _, out = _step(step_scale.ScaledSteps(sgd, {'weights': [3.0]}), w, g)
  np.testing.assert_allclose(out['weights'][0].numpy(), [0.7, 0.7], rtol=1e-6)
  np.testing.assert_allclose(out['rates'][0].numpy(), [0.9, 0.9], rtol=1e-6)


def test_wrong_scales_are_refused():
  sgd = tff.learning.optimizers.build_sgdm(learning_rate=0.1)
  w = (np.ones([2], np.float32),)
  with pytest.raises(ValueError, match='1 scales for'):
    _step(step_scale.ScaledSteps(sgd, (1.0,)), w + w, w + w)
  with pytest.raises(ValueError, match='not in the weights'):
    _step(step_scale.ScaledSteps(sgd, {'nope': [1.0]}), {'weights': list(w)}, {'weights': list(w)})


def test_all_ones_is_the_optimizer_itself():
  sgd = tff.learning.optimizers.build_sgdm(learning_rate=0.1)
  assert step_scale.scaled(sgd, {'weights': [1.0, 1.0]}) is sgd
  assert isinstance(step_scale.scaled(sgd, (1.0, 2.0)), step_scale.ScaledSteps)
