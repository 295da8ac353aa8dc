"""Model builders: the papers' shapes, and the functional form equals Keras."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.models import MODELS, build_model_spec
from tff_meta.registry import UnknownNameError


def test_femnist_cnn_matches_paper_size():
  model = MODELS.get('femnist_cnn')((28, 28), 62)
  # FedMeta Appendix A.1: conv32-pool-conv64-pool-dense2048-dense62 = 6.6M parameters.
  assert model.count_params() == 6_603_710
  assert model.output_shape == (None, 62)


def test_shakespeare_lstm_shape():
  model = MODELS.get('shakespeare_lstm')((80,), 81)
  assert model.output_shape == (None, 81)
  assert [l.units for l in model.layers if isinstance(l, tf.keras.layers.LSTM)] == [256, 256]


def test_sent140_lstm_with_frozen_glove():
  emb = np.random.default_rng(0).normal(size=(50, 300)).astype(np.float32)
  spec = build_model_spec('sent140_lstm', (25,), 2, x_dtype=np.int32, embedding_matrix=emb)
  assert len(spec.frozen) == 1 and spec.frozen[0].shape == (50, 300)
  assert all(w.shape != (50, 300) for w in spec.initial_trainable)


def test_functional_logits_equal_keras(tff_context):
  spec = build_model_spec('mlp', (8, 8), 10, seed=3, hidden_units=(16,))
  keras_model = MODELS.get('mlp')((8, 8), 10, hidden_units=(16,))
  keras_model.set_weights(spec.initial_trainable)
  x = np.random.default_rng(0).random((5, 8, 8)).astype(np.float32)
  expected = keras_model(x).numpy()   # before any graph-mode tracing (Keras 2 rule)

  @tff.tensorflow.computation(spec.weights_type, tff.TensorType(np.float32, [None, 8, 8]))
  def logits(weights, x):
    return spec.logits(weights, x)

  np.testing.assert_allclose(logits(spec.initial_trainable, x), expected,
                             rtol=1e-5, atol=1e-6)


def test_same_seed_same_initial_weights():
  a = build_model_spec('mlp', (8, 8), 10, seed=1)
  b = build_model_spec('mlp', (8, 8), 10, seed=1)
  c = build_model_spec('mlp', (8, 8), 10, seed=2)
  assert all(np.array_equal(x, y) for x, y in zip(a.initial_trainable, b.initial_trainable))
  assert not np.array_equal(a.initial_trainable[0], c.initial_trainable[0])


def test_unknown_model_lists_known_ones():
  with pytest.raises(UnknownNameError, match='Known models: .*femnist_cnn'):
    MODELS.get('resnet')
