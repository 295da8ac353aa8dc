"""Model builders: the papers' shapes, and the functional form equals Keras."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.models import MODELS, build_model_spec
from tff_meta.core.registry import UnknownNameError


def test_femnist_cnn_matches_paper_size():
  model = MODELS.get('femnist_cnn')((28, 28), 62)
  # FedMeta Appendix A.1: conv32-pool-conv64-pool-dense2048-dense62 = 6.6M parameters.
  assert model.count_params() == 6_603_710
  assert model.output_shape == (None, 62)


def test_shakespeare_lstm_shape():
  model = MODELS.get('shakespeare_lstm')((80,), 81)
  assert model.output_shape == (None, 81)
  assert [l.cell.units for l in model.layers if isinstance(l, tf.keras.layers.RNN)] == [256, 256]


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


@pytest.mark.slow
def test_looped_lstm_second_order_gradient_equals_unrolled(tff_context):
  """The while-loop LSTM used by the paper models gives MAML's exact meta-gradient."""
  from tff_meta.algorithms import fedmeta  # pylint: disable=g-import-not-at-top
  from tff_meta.models import keras_models  # pylint: disable=g-import-not-at-top

  def builder(unroll):
    def build(element_shape, num_classes):
      rnn = (lambda u, seq=False: tf.keras.layers.LSTM(u, return_sequences=seq, unroll=True)
             ) if unroll else keras_models.lstm
      return tf.keras.Sequential([
          tf.keras.layers.InputLayer(input_shape=element_shape, dtype=tf.int32),
          tf.keras.layers.Embedding(num_classes, 3), rnn(3, True), rnn(3),
          tf.keras.layers.Dense(num_classes)])
    return build

  rng = np.random.default_rng(0)
  ep = {k: rng.integers(0, 7, (6, 3) if k.endswith('x') else 6).astype(np.int32)
        for k in ('support_x', 'support_y', 'query_x', 'query_y')}
  grads = {}
  for unroll in (True, False):
    name = f'_test_lstm_unroll_{unroll}'
    if name not in MODELS:
      MODELS.add(name, builder(unroll))
    spec = build_model_spec(name, (3,), 7, x_dtype=np.int32, seed=0)
    for variant in ('maml', 'fomaml') if not unroll else ('maml',):
      proc = fedmeta.build_fedmeta_process(
          spec, variant=variant, inner_lr=1.0, inner_steps=1,
          server_optimizer=tff.learning.optimizers.build_sgdm(1.0))
      grads[unroll, variant] = proc.client_update(
          proc.initialize()['params'], ep)['weighted_update']['weights']
  diff = lambda a, b: max(np.max(np.abs(x - y)) for x, y in zip(a, b))
  assert diff(grads[True, 'maml'], grads[False, 'maml']) < 1e-6
  assert diff(grads[False, 'maml'], grads[False, 'fomaml']) > 1e-3


def test_lenet_is_the_two_conv_three_dense_cifar_model():
  model = MODELS.get('lenet')((32, 32, 3), 10)
  # conv6 5x5, pool, conv16 5x5, pool, 400-120-84-10: the classic 62,006 parameters.
  assert model.count_params() == 62_006
  spec = build_model_spec('lenet', (28, 28), 10)   # grey images get a channel axis
  assert [i for i, _ in spec.weight_layers] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
