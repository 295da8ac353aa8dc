"""FedProx (Li et al. 2020, Eq. 2) against TFF's `build_weighted_fed_prox` and plain TF."""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, fedprox, process
from tff_meta.evaluation import flops

MU, LR, EPOCHS, BATCH = 0.5, 0.1, 2, 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  clients = [collections.OrderedDict(x=c.all.x, y=c.all.y) for c in data.train[:2]]
  return model, clients


def _ours(model, mu):
  """Our process; `mu` may be negative here (the builder refuses that)."""
  return process.build_federated_process(
      initial_params=collections.OrderedDict(weights=model.initial_trainable),
      client_fn=functools.partial(fedprox._client_fn, model, _sgd(LR), mu, EPOCHS, BATCH),
      client_data_spec=collections.OrderedDict(x=model.x_spec,
                                               y=tf.TensorSpec([None], tf.int32)),
      server_optimizer=_sgd(1.0), weighting='num_examples')


@pytest.mark.slow
def test_one_round_against_tff_build_weighted_fed_prox(tff_context, setup):
  model, clients = setup
  spec = (tf.TensorSpec([None, 8, 8], tf.float32), tf.TensorSpec([None], tf.int32))
  keras = lambda: tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(8, 8)), tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(16, activation='relu'), tf.keras.layers.Dense(10)])
  theirs = tff.learning.algorithms.build_weighted_fed_prox(
      lambda: tff.learning.models.from_keras_model(
          keras(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          input_spec=spec),
      proximal_strength=MU, client_optimizer_fn=_sgd(LR), server_optimizer_fn=_sgd(1.0))
  state = theirs.set_model_weights(
      theirs.initialize(),
      tff.learning.models.ModelWeights(trainable=model.initial_trainable, non_trainable=[]))
  state = theirs.next(state, [tf.data.Dataset.from_tensor_slices((c['x'], c['y']))
                              .batch(BATCH).repeat(EPOCHS) for c in clients]).state
  their_weights = theirs.get_model_weights(state).trainable
  gaps = {}
  for mu in (MU, -MU):
    ours = _ours(model, mu)
    our_state, _ = ours.next(ours.initialize(), clients)
    gaps[mu] = max(np.max(np.abs(a - b))
                   for a, b in zip(our_state['params']['weights'], their_weights))
  # TFF 0.87 adds mu (w_t - w) to the gradient (see fedprox's docstring): it
  # equals our process with the sign of mu flipped, and differs from Eq. 2.
  assert gaps[-MU] < 2e-6
  assert gaps[MU] > 1e-2


def test_client_update_minimizes_the_proximal_objective(tff_context, setup):
  model, clients = setup
  proc = fedprox.build_fedprox_process(model, mu=MU, client_optimizer=_sgd(LR),
                                       server_optimizer=_sgd(1.0), local_epochs=EPOCHS,
                                       batch_size=BATCH)
  params = proc.initialize()['params']
  out = proc.client_update(params, clients[0])
  # Plain TF: minibatch SGD on CE + (mu/2) ||w - w_t||^2, differentiated as a whole.
  anchor = [tf.constant(w) for w in model.initial_trainable]
  w = list(anchor)
  x, y = clients[0]['x'], clients[0]['y']
  for _ in range(EPOCHS):
    for start in range(0, len(y), BATCH):
      with tf.GradientTape() as tape:
        tape.watch(w)
        prox = tf.add_n([tf.reduce_sum(tf.square(a - b)) for a, b in zip(w, anchor)])
        loss = helpers.ce(helpers.mlp_logits(w, x[start:start + BATCH]),
                          y[start:start + BATCH]) + 0.5 * MU * prox
      w = [a - LR * g for a, g in zip(w, tape.gradient(loss, w))]
  expected = [(a - b).numpy() * len(y) for a, b in zip(anchor, w)]
  helpers.assert_rel_close(out['weighted_update']['weights'], expected, rtol=1e-5)
  assert out['weight'] == len(y) and out['metrics']['num_examples'] == len(y)


def test_registry_and_bad_mu(setup):
  model, clients = setup
  alg = ALGORITHMS.get('fedprox')(model, Hparams(prox_mu=0.1))
  assert alg.display_name == 'FedProx' and alg.train_data == 'full'
  fedavg = ALGORITHMS.get('fedavg')
  fedavg_flops = fedavg.round_flops(fedavg.make_hparams(Hparams()), flops.model_cost(model), 0, 0,
                                    len(clients[0]['y']))
  assert alg.client_flops(clients[0]) > fedavg_flops
  with pytest.raises(ValueError, match='prox_mu >= 0'):
    ALGORITHMS.get('fedprox')(model, Hparams(prox_mu=-0.1))
