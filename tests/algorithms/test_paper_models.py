"""One FedMeta(MAML) round with each paper model on data in its real format.

Widths are shrunk through the builders' options so the test stays fast; the
layer structure (CNN, stacked character LSTM, word LSTM with frozen GloVe) is
the paper's. Checks that second-order meta-gradients flow through each
architecture inside TFF and move every trainable weight.
"""

import json
import os

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.conftest import FIXTURES
from tff_meta.algorithms import fedmeta
from tff_meta.data import load_dataset, protocol
from tff_meta.models import build_model_spec
from tff_meta.data import client_data


def _one_round(ds, model_name, **model_options):
  data = protocol.prepare(ds, support_fraction=0.5, min_samples=4, seed=0,
                          client_split=(0.5, 0.0, 0.5))
  model = build_model_spec(model_name, ds.element_shape, ds.num_classes, x_dtype=ds.x_dtype,
                           **model_options)
  proc = fedmeta.build_fedmeta_process(
      model, variant='maml', inner_lr=0.1, inner_steps=1,
      server_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=0.5))
  state = proc.initialize()
  clients = [client_data.episode(c) for c in data.train[:2]]
  for c in clients:   # keep episodes small
    for k in c:
      c[k] = c[k][:16]
  new_state, metrics = proc.next(state, clients)
  assert metrics['num_rejected'] == 0 and np.isfinite(metrics['loss_sum'])
  moved = [not np.allclose(a, b) for a, b in zip(state['params']['weights'],
                                                  new_state['params']['weights'])]
  assert all(moved), f'weights not updated: {moved}'
  return model


@pytest.mark.slow
def test_femnist_cnn_on_tff_emnist(tff_context):
  ds = load_dataset('emnist', cache_dir=os.path.join(FIXTURES, 'tff'), max_clients=4)
  _one_round(ds, 'femnist_cnn', dense_units=32)


@pytest.mark.slow
def test_shakespeare_lstm_on_leaf_json(tff_context):
  ds = load_dataset('leaf_shakespeare', path=os.path.join(FIXTURES, 'leaf', 'shakespeare'),
                    max_clients=4)
  _one_round(ds, 'shakespeare_lstm', units=8)


@pytest.mark.slow
def test_sent140_lstm_with_glove(tff_context, tmp_path):
  rng = np.random.default_rng(0)
  words = ['good', 'bad', 'day', 'sad', 'happy', 'night', 'love', 'hate']
  users = [f'u{i}' for i in range(4)]
  user_data = {}
  for u in users:
    tweets = [' '.join(rng.choice(words, 6)) for _ in range(8)]
    user_data[u] = {'x': [['1', 'date', 'NO_QUERY', u, t] for t in tweets],
                    'y': [int('good' in t or 'happy' in t) for t in tweets]}
  path = tmp_path / 'all_data_0.json'
  path.write_text(json.dumps({'users': users, 'num_samples': [8] * 4, 'user_data': user_data}))
  glove = tmp_path / 'glove.txt'
  glove.write_text(''.join(f'{w} ' + ' '.join(f'{v:.3f}' for v in rng.normal(size=300)) + '\n'
                           for w in words))
  ds = load_dataset('leaf_sent140', path=str(path), glove_path=str(glove))
  model = _one_round(ds, 'sent140_lstm', units=8,
                     embedding_matrix=ds.extras['embeddings'])
  assert model.frozen[0].shape[1] == 300


@pytest.mark.slow
def test_fedavg_minibatch_training_runs_the_character_lstm(tff_context):
  """FedAvg's local minibatch loop takes the gradient of a Keras RNN inside TFF
  (it used to fail inside `Dataset.reduce`: 'You must feed a value for
  placeholder tensor input_1')."""
  from tff_meta.algorithms import ALGORITHMS, Hparams  # pylint: disable=g-import-not-at-top
  ds = load_dataset('leaf_shakespeare', path=os.path.join(FIXTURES, 'leaf', 'shakespeare'),
                    max_clients=4)
  data = protocol.prepare(ds, support_fraction=0.5, min_samples=4, seed=0,
                          client_split=(0.5, 0.0, 0.5))
  model = build_model_spec('shakespeare_lstm', ds.element_shape, ds.num_classes,
                           x_dtype=ds.x_dtype, units=8)
  alg = ALGORITHMS.get('fedavg')(model, Hparams(client_optimizer='sgd', client_lr=0.5,
                                                batch_size=4, local_epochs=1))
  state = alg.process.initialize()
  batch = client_data.round_data(alg.train_data, data.train[:2], 0, 1)
  for c in batch:
    for k in c:
      c[k] = c[k][:10]
  new_state, metrics = alg.process.next(state, batch)
  assert metrics['num_rejected'] == 0 and metrics['num_examples'] == 20
  assert np.isfinite(metrics['loss_sum'])
  moved = [not np.allclose(a, b) for a, b in zip(state['params']['weights'],
                                                  new_state['params']['weights'])]
  assert all(moved), f'weights not updated: {moved}'
