"""FedAvg against TFF's own `tff.learning.algorithms.build_weighted_fed_avg`."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, fedavg

BATCH = 4


def _keras_mlp():
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(8, 8)), tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(16, activation='relu'), tf.keras.layers.Dense(10)])


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  clients = [data.train[i].all for i in range(3)]
  return model, clients


@pytest.mark.slow
def test_matches_tff_weighted_fed_avg(tff_context, setup):
  model, clients = setup
  client_opt = lambda: tff.learning.optimizers.build_sgdm(learning_rate=0.05)
  server_opt = lambda: tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  ours = fedavg.build_fedavg_process(model, client_optimizer=client_opt(),
                                     server_optimizer=server_opt(), local_epochs=2,
                                     batch_size=BATCH)
  spec = (tf.TensorSpec([None, 8, 8], tf.float32), tf.TensorSpec([None], tf.int32))
  theirs = tff.learning.algorithms.build_weighted_fed_avg(
      lambda: tff.learning.models.from_keras_model(
          _keras_mlp(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          input_spec=spec),
      client_optimizer_fn=client_opt(), server_optimizer_fn=server_opt())
  their_state = theirs.initialize()
  their_state = theirs.set_model_weights(
      their_state, tff.learning.models.ModelWeights(trainable=model.initial_trainable,
                                                    non_trainable=[]))
  our_state = ours.initialize()
  for _ in range(2):
    datasets = [tf.data.Dataset.from_tensor_slices((c.x, c.y)).batch(BATCH).repeat(2)
                for c in clients]
    their_state = theirs.next(their_state, datasets).state
    our_state, metrics = ours.next(
        our_state, [collections.OrderedDict(x=c.x, y=c.y) for c in clients])
  theirs_w = theirs.get_model_weights(their_state).trainable
  for a, b in zip(our_state['params']['weights'], theirs_w):
    np.testing.assert_allclose(a, b, atol=2e-6)
  assert metrics['num_examples'] == sum(len(c) for c in clients)


def test_update_weighted_by_examples(tff_context, setup):
  model, clients = setup
  proc = fedavg.build_fedavg_process(
      model, client_optimizer=tff.learning.optimizers.build_sgdm(0.05),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_epochs=1, batch_size=BATCH)
  state = proc.initialize()
  data = [collections.OrderedDict(x=c.x, y=c.y) for c in clients[:2]]
  outs = [proc.client_update(state['params'], d) for d in data]
  assert [o['weight'] for o in outs] == [float(len(c)) for c in clients[:2]]
  new_state, _ = proc.next(state, data)
  total = sum(o['weight'] for o in outs)
  for i, w in enumerate(state['params']['weights']):
    mean = sum(o['weighted_update']['weights'][i] for o in outs) / total
    np.testing.assert_allclose(new_state['params']['weights'][i], w - mean, atol=1e-6)


def test_empty_client_has_no_effect(tff_context, setup):
  model, clients = setup
  proc = fedavg.build_fedavg_process(
      model, client_optimizer=tff.learning.optimizers.build_sgdm(0.05),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_epochs=1, batch_size=BATCH)
  state = proc.initialize()
  c = clients[0]
  good = collections.OrderedDict(x=c.x, y=c.y)
  empty = collections.OrderedDict(x=c.x[:0], y=c.y[:0])
  with_empty, metrics = proc.next(state, [good, empty])
  alone, _ = proc.next(state, [good])
  assert metrics['num_rejected'] == 1
  for a, b in zip(with_empty['params']['weights'], alone['params']['weights']):
    np.testing.assert_allclose(a, b, atol=1e-7)


@pytest.mark.slow
def test_registry_builds_named_algorithms(setup):
  model, _ = setup
  # SCAFFOLD needs plain SGD and the population (the program fills it from the data).
  hp = Hparams(client_optimizer='sgd', population=10, sampled_clients=2)
  names = {n: ALGORITHMS.get(n)(model, hp).display_name for n in ALGORITHMS}
  assert names == {
      'fedavg': 'FedAvg', 'fedavg_meta': 'FedAvg(Meta)', 'fedmeta_maml': 'FedMeta(MAML)',
      'fedmeta_fomaml': 'FedMeta(FOMAML)', 'fedmeta_metasgd': 'FedMeta(Meta-SGD)',
      'per_fedavg_fo': 'Per-FedAvg(FO)', 'per_fedavg_hf': 'Per-FedAvg(HF)', 'fedprox': 'FedProx',
      'pfedme': 'pFedMe', 'reptile': 'FedEC-wo (Reptile)', 'fedec': 'FedEC', 'fedec_l2': 'FedEC-l2',
      'fedper': 'FedPer', 'lg_fedavg': 'LG-FedAvg', 'fedrep': 'FedRep',
      'fedavg_meta_fedper': 'FedAvg(Meta)+FedPer',
      'fedmeta_fedper_maml': 'FedMeta(MAML)+FedPer',
      'fedmeta_fedper_metasgd': 'FedMeta(Meta-SGD)+FedPer', 'scaffold': 'SCAFFOLD',
      'ditto': 'Ditto', 'apfl': 'APFL', 'local_only': 'Local Only'}
  with pytest.raises(KeyError, match="Unknown algorithm 'fedmeta_mamll'.*Did you mean 'fedmeta_maml'"):
    ALGORITHMS.get('fedmeta_mamll')
