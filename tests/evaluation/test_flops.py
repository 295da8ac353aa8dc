"""Analytical FLOPs: layer formulas, agreement with TensorFlow's profiler, round costs."""

import collections
import functools
import math

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, fedmeta
from tff_meta.algorithms import base as algorithms_base
from tff_meta.evaluation import flops
from tff_meta.learning import losses
from tff_meta.models import MODELS, build_model_spec


def _seq(input_shape, *layers, dtype=tf.float32):
  return tf.keras.Sequential(
      [tf.keras.layers.InputLayer(input_shape=input_shape, dtype=dtype), *layers])


# ---- layer formulas -------------------------------------------------------------------------

@pytest.mark.parametrize('n_in, n_out', [(1, 1), (64, 10), (300, 7)])
def test_dense_layer_is_2_in_out_plus_out_for_the_bias(n_in, n_out):
  with_bias = _seq((n_in,), tf.keras.layers.Dense(n_out))
  no_bias = _seq((n_in,), tf.keras.layers.Dense(n_out, use_bias=False))
  relu = _seq((n_in,), tf.keras.layers.Dense(n_out, activation='relu'))
  assert flops.model_forward_flops(with_bias) == 2 * n_in * n_out + n_out
  assert flops.model_forward_flops(no_bias) == 2 * n_in * n_out
  assert flops.model_forward_flops(relu) == 2 * n_in * n_out + n_out + n_out   # + 1 per ReLU
  (layer,) = flops.forward_flops_breakdown(with_bias)
  assert (layer.macs, layer.bias, layer.activation) == (n_in * n_out, n_out, 0)


def test_dense_on_a_sequence_counts_every_position():
  model = _seq((5, 8), tf.keras.layers.Dense(3))
  assert flops.model_forward_flops(model) == 5 * (2 * 8 * 3 + 3)


def test_conv_pool_and_zero_cost_layers():
  model = _seq((10, 10), tf.keras.layers.Reshape((10, 10, 1)),
               tf.keras.layers.Conv2D(4, 3, padding='valid', activation='relu'),   # 8x8x4
               tf.keras.layers.MaxPool2D(2),                                        # 4x4x4
               tf.keras.layers.Flatten(), tf.keras.layers.Dropout(0.5))
  conv = 8 * 8 * 4 * (2 * 3 * 3 * 1) + 8 * 8 * 4 + 8 * 8 * 4   # products + bias + relu
  pool = 4 * 4 * 4 * (2 * 2)                                    # kernel_area per output
  assert flops.model_forward_flops(model) == conv + pool
  kinds = {f.kind: f.flops for f in flops.forward_flops_breakdown(model)}
  assert kinds['Reshape'] == kinds['Flatten'] == kinds['Dropout'] == 0


def test_embedding_is_free_and_lstm_is_counted_per_time_step():
  steps, vocab, emb, units = 7, 20, 3, 4
  model = _seq((steps,), tf.keras.layers.Embedding(vocab, emb),
               tf.keras.layers.RNN(tf.keras.layers.LSTMCell(units)), dtype=tf.int32)
  embedding, lstm = flops.forward_flops_breakdown(model)
  assert embedding.flops == 0 and embedding.trainable
  g = 4 * units
  per_step = 2 * g * (emb + units) + g + g + 4 * units + 5 * units
  assert lstm.flops == steps * per_step
  assert lstm.activation == steps * 5 * units                  # 3 sigmoid + 2 tanh


def test_femnist_cnn_by_hand():
  model = MODELS.get('femnist_cnn')((28, 28), 62)
  conv1 = 28 * 28 * 32 * (2 * 25 * 1 + 1 + 1)
  pool1 = 14 * 14 * 32 * 4
  conv2 = 14 * 14 * 64 * (2 * 25 * 32 + 1 + 1)
  pool2 = 7 * 7 * 64 * 4
  dense = 2048 * (2 * 3136 + 1 + 1) + 62 * (2 * 2048 + 1)
  assert flops.model_forward_flops(model) == conv1 + pool1 + conv2 + pool2 + dense == 34_540_862


def test_unknown_layers_are_refused():
  model = _seq((4, 4, 2), tf.keras.layers.Conv2DTranspose(2, 3))
  with pytest.raises(flops.UnsupportedLayerError, match='Conv2DTranspose'):
    flops.model_forward_flops(model)


def test_model_spec_is_counted_like_its_keras_model():
  spec = helpers.mlp_spec(hidden=16)
  keras_model = MODELS.get('mlp')((8, 8), 10, hidden_units=(16,))
  assert flops.model_forward_flops(spec) == flops.model_forward_flops(keras_model) == 2410
  cost = flops.model_cost(spec)
  assert cost.params == spec.num_parameters == 1210
  # The first layer's input gradient (2 * 64 * 16) is not computed: the input is data.
  assert cost.backward == 2 * 2410 - 2 * 64 * 16


# ---- agreement with TensorFlow's profiler ----------------------------------------------------
# The profiler counts MatMul/Conv2D (2 per multiply-add), BiasAdd (1 per element), MaxPool
# (kernel_area per output), Add/Mul, and nothing for Relu/Sigmoid/Tanh: so it must equal
# `profiler_comparable` (our count without the nonlinearities) exactly.

def _comparable(model):
  return sum(f.profiler_comparable for f in flops.forward_flops_breakdown(model))


@pytest.mark.parametrize('hidden', [(), (16,), (64, 32)])
def test_dense_models_match_the_profiler_exactly(hidden):
  model = MODELS.get('mlp')((8, 8), 10, hidden_units=hidden)
  assert flops.profile_forward_flops(model, batch_size=1) == _comparable(model)
  assert flops.profile_forward_flops(model, batch_size=5) == 5 * _comparable(model)
  # The nonlinearities are all the difference: 1 per hidden unit.
  assert flops.model_forward_flops(model) - _comparable(model) == sum(hidden)


@pytest.mark.slow
def test_femnist_cnn_matches_the_profiler():
  model = MODELS.get('femnist_cnn')((28, 28), 62)
  profiled = flops.profile_forward_flops(model, batch_size=2) / 2
  assert profiled == _comparable(model) == 34_501_182
  # With the ReLUs (28*28*32 + 14*14*64 + 2048 = 39,680 FLOPs) we are 0.12% above it.
  assert 0 < flops.model_forward_flops(model) / profiled - 1 < 0.002


def test_unrolled_lstm_matches_the_profiler_exactly():
  # The profiler cannot see into a while loop, so the check unrolls the same layers.
  model = _seq((5,), tf.keras.layers.Embedding(20, 3),
               tf.keras.layers.RNN(tf.keras.layers.LSTMCell(4), unroll=True,
                                   return_sequences=True),
               tf.keras.layers.RNN(tf.keras.layers.LSTMCell(4), unroll=True),
               tf.keras.layers.Dense(2), dtype=tf.int32)
  assert flops.profile_forward_flops(model, batch_size=3) == 3 * _comparable(model)


# ---- per client round ---------------------------------------------------------------------

def _round(name, cost, hp, num_support, num_query, num_examples):
  """Algorithm `name`'s FLOPs count (its registry entry's), for `hp` (a config's Hparams)."""
  entry = ALGORITHMS.get(name)
  return entry.round_flops(entry.make_hparams(hp), cost, num_support, num_query, num_examples)


def _client_round(name, spec, hp, num_support=0, num_query=0, num_examples=None):
  if num_examples is None:
    num_examples = num_support + num_query
  return _round(name, flops.model_cost(spec), hp, num_support, num_query, num_examples)


def test_round_formulas():
  cost = flops.ModelCost(forward=100, backward=180, params=50)
  step = 280
  hp = Hparams(local_epochs=2, batch_size=4, client_optimizer='adam', inner_steps=3)
  # FedAvg: E * n * (F + B) + E * ceil(n / B) optimizer steps * P * 12 (Adam).
  fedavg = _round('fedavg', cost, hp, 0, 0, 10)
  assert fedavg == 2 * 10 * step + 2 * math.ceil(10 / 4) * 50 * 12
  assert _round('fedavg_meta', cost, hp, 0, 0, 10) == fedavg
  n_s, n_q, k = 6, 9, 3
  fo = _round('fedmeta_fomaml', cost, hp, n_s, n_q, n_s + n_q)
  assert fo == k * (n_s * step + 2 * 50) + n_q * step
  maml = _round('fedmeta_maml', cost, hp, n_s, n_q, n_s + n_q)
  assert maml - fo == k * (2 * n_s * step + 2 * 50)          # the Hessian-vector products
  metasgd = _round('fedmeta_metasgd', cost, hp, n_s, n_q, n_s + n_q)
  assert metasgd - maml == k * 50                            # v (o) g for d/d alpha
  with pytest.raises(KeyError, match='Unknown algorithm'):
    _round('no_such_method', cost, hp, 1, 1, 2)


def test_fedec_family_counts_its_constraint():
  cost = flops.ModelCost(forward=100, backward=180, params=50)
  hp = Hparams(local_epochs=2, batch_size=4, client_optimizer='sgd')
  fedavg = _round('fedavg', cost, hp, 0, 0, 10)
  assert _round('reptile', cost, hp, 0, 0, 10) == fedavg          # no constraint
  assert _round('local_only', cost, hp, 0, 0, 10) == fedavg       # the same local training
  # FedEC: the last adapted model's forward pass on every example of every epoch (KL, Eq. 9).
  assert _round('fedec', cost, hp, 0, 0, 10) == fedavg + 2 * 10 * 100
  # FedEC-l2: the L2 term's value and gradient, 6P per step (2 epochs x ceil(10 / 4) steps).
  assert _round('fedec_l2', cost, hp, 0, 0, 10) == fedavg + 6 * 50 * 2 * 3


def test_peer_round_formulas():
  cost = flops.ModelCost(forward=100, backward=180, params=50)
  step, p = 280, 50
  hp = Hparams(local_epochs=2, batch_size=4, client_optimizer='sgd', local_steps=3,
               pfedme_inner_steps=5)
  fedavg = _round('fedavg', cost, hp, 0, 0, 10)
  # FedProx: + 6P per local step (2 epochs x ceil(10 / 4) steps) for the proximal term.
  assert _round('fedprox', cost, hp, 0, 0, 10) == fedavg + 6 * p * 2 * 3
  # Per-FedAvg: tau = 3 steps on batches of min(4, n); FO two gradients + two SGD steps.
  fo = _round('per_fedavg_fo', cost, hp, 0, 0, 10)
  assert fo == 3 * (2 * 4 * step + 4 * p)
  hf = _round('per_fedavg_hf', cost, hp, 0, 0, 10)
  assert hf - fo == 3 * (2 * 4 * step + 8 * p)               # the finite-difference HVP
  assert _round('per_fedavg_fo', cost, hp, 0, 0, 2) == 3 * (2 * 2 * step + 4 * p)
  # pFedMe: R = 3 steps of K = 5 proximal steps, the metrics forward and the w update.
  assert _round('pfedme', cost, hp, 0, 0, 10) == 3 * (
      5 * (4 * step + 8 * p) + 4 * 100 + 3 * p)
  assert _round('pfedme', cost, hp, 0, 0, 0) == 0


def test_client_flops_fn_reads_the_clients_sizes():
  spec = helpers.mlp_spec()
  hp = Hparams(inner_steps=2)
  episode = collections.OrderedDict(
      support_x=np.zeros((4, 8, 8), np.float32), support_y=np.zeros(4, np.int32),
      query_x=np.zeros((11, 8, 8), np.float32), query_y=np.zeros(11, np.int32))
  full = collections.OrderedDict(x=np.zeros((15, 8, 8), np.float32), y=np.zeros(15, np.int32))
  seen = []
  count = flops.client_flops_fn(lambda cost, *sizes: seen.append((cost, sizes)) or 7, spec)
  assert count(episode) == 7 and count(full) == 7
  assert seen == [(flops.model_cost(spec), (4, 11, 15)), (flops.model_cost(spec), (0, 0, 15))]
  entry = ALGORITHMS.get('fedmeta_maml')
  assert flops.client_flops_fn(functools.partial(entry.round_flops, entry.make_hparams(hp)),
                               spec)(episode) == _client_round('fedmeta_maml', spec, hp, 4, 11)


@pytest.mark.slow
def test_algorithms_carry_their_flops_function():
  spec = helpers.mlp_spec()
  full = collections.OrderedDict(x=np.zeros((15, 8, 8), np.float32), y=np.zeros(15, np.int32))
  for name in ('fedavg', 'fedavg_meta', 'fedmeta_maml', 'fedmeta_fomaml', 'fedmeta_metasgd'):
    alg = ALGORITHMS.get(name)(spec, Hparams())
    assert alg.client_flops is not None
  assert ALGORITHMS.get('fedec')(spec, Hparams()).client_flops(full) == _client_round(
      'fedec', spec, Hparams(), num_examples=15)


def _episode_specs(spec, n_s, n_q):
  xs = spec.x_spec.shape[1:]
  return [tf.TensorSpec([n_s, *xs]), tf.TensorSpec([n_s], tf.int32),
          tf.TensorSpec([n_q, *xs]), tf.TensorSpec([n_q], tf.int32)]


@pytest.mark.slow
@pytest.mark.parametrize('variant', ['fomaml', 'maml', 'metasgd'])
@pytest.mark.parametrize('steps', [1, 2])
def test_fedmeta_client_work_matches_the_profiler(variant, steps):
  """The whole meta-gradient graph (inner steps, query pass, second order) within 1%."""
  n_s, n_q = 20, 30
  spec = build_model_spec('femnist_cnn', (28, 28), 62, dense_units=128)
  num_weights = len(spec.weight_specs)

  def client_work(*args):
    params = collections.OrderedDict(weights=list(args[:num_weights]))
    if variant == 'metasgd':
      params['rates'] = list(args[num_weights + 4:])
    sx, sy, qx, qy = args[num_weights:num_weights + 4]
    data = dict(support_x=sx, support_y=sy, query_x=qx, query_y=qy)
    grads, _ = fedmeta.meta_gradient(spec, params, data, inner_lr=0.1, inner_steps=steps,
                                     first_order=variant == 'fomaml')
    return grads

  specs = list(spec.weight_specs) + _episode_specs(spec, n_s, n_q)
  if variant == 'metasgd':
    specs += list(spec.weight_specs)
  profiled = flops.profile_function_flops(client_work, *specs)
  formula = _client_round(f'fedmeta_{variant}', spec, Hparams(inner_steps=steps),
                          num_support=n_s, num_query=n_q)
  assert abs(formula / profiled - 1) < 0.01, (formula, profiled)


@pytest.mark.parametrize('optimizer', ['sgd', 'adam'])
def test_fedavg_step_matches_the_profiler(optimizer):
  """One local minibatch step (fwd + bwd + optimizer update) within 4%.

  The gap is what the profiler does not count: the ReLUs, their derivatives and Adam's sqrt.
  """
  batch = 10
  spec = build_model_spec('mlp', (8, 8), 10, hidden_units=(64, 32))
  opt = algorithms_base.build_optimizer(optimizer, 0.01)

  def step(*args):
    weights, x, y = tuple(args[:-2]), args[-2], args[-1]
    state = opt.initialize(tuple(tf.TensorSpec(w.shape, w.dtype) for w in weights))
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = losses.cross_entropy(spec.logits(list(weights), x), y)
    _, weights = opt.next(state, weights, tape.gradient(loss, weights))
    return weights

  xs = spec.x_spec.shape[1:]
  profiled = flops.profile_function_flops(
      step, *spec.weight_specs, tf.TensorSpec([batch, *xs]), tf.TensorSpec([batch], tf.int32))
  formula = _client_round(
      'fedavg', spec, Hparams(client_optimizer=optimizer, batch_size=batch, local_epochs=1),
      num_examples=batch)
  assert 0 <= formula / profiled - 1 < 0.04, (formula, profiled)
