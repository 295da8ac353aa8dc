"""FedAvg and FedAvg(Meta).

- FedAvg: McMahan et al. 2017, as run in FedMeta (Chen et al. 2018) Sec. 4.2:
  each client trains the broadcast model on all its data for E local epochs
  with a local optimizer (Adam, Appendix A.2) and returns
  theta - theta_local; the server applies the example-weighted mean through
  its optimizer (SGD with rate 1.0 gives the classic average of models).
- FedAvg(Meta): the same training; at evaluation each test client first
  fine-tunes the global model on its support set with the local optimizer,
  then is scored on its query set (FedMeta Sec. 4.2, "learning to fine-tune").
  FedAvg is scored on the query set without adaptation.

Client work type signature:
    (<weights=float32[...]...>, <x=X[?,...], y=int32[?]>)
      -> <weighted_update, weight, metrics, num_clients, num_rejected>
"""

from __future__ import annotations

import collections
import functools

import tensorflow as tf

from tff_meta.algorithms import base, process
from tff_meta.evaluation import flops, personalized
from tff_meta.learning import local_training


def _client_fn(model, optimizer, epochs, batch_size, params, data):
  trained, stats = local_training.train_minibatches(
      model.logits, params['weights'], data['x'], data['y'], optimizer, epochs, batch_size)
  update = collections.OrderedDict(
      weights=local_training.pseudo_gradient(params['weights'], trained))
  return update, tf.size(data['y']), local_training.per_epoch(stats, epochs)


def build_fedavg_process(model, *, client_optimizer, server_optimizer, local_epochs: int,
                         batch_size: int, weighting: str = 'num_examples', model_aggregator=None):
  """The FedAvg `IterativeProcess` (see module docstring)."""
  if local_epochs < 1 or batch_size < 1:
    raise ValueError(f'local_epochs and batch_size must be >= 1, got {local_epochs}, {batch_size}.')
  data_spec = collections.OrderedDict(x=model.x_spec, y=tf.TensorSpec([None], tf.int32))
  return process.build_federated_process(
      initial_params=collections.OrderedDict(weights=model.initial_trainable),
      client_fn=functools.partial(_client_fn, model, client_optimizer, local_epochs, batch_size),
      client_data_spec=data_spec, server_optimizer=server_optimizer, weighting=weighting,
      model_aggregator=model_aggregator)


def _build(model, hp: base.Hparams, *, fine_tune: bool, name: str, display_name: str,
           model_aggregator=None):
  client_optimizer = base.build_optimizer(hp.client_optimizer, hp.client_lr)
  proc = build_fedavg_process(
      model, client_optimizer=client_optimizer,
      server_optimizer=base.build_optimizer(hp.fedavg_server_optimizer, hp.fedavg_server_lr),
      local_epochs=hp.local_epochs, batch_size=hp.batch_size,
      weighting=hp.weighting or 'num_examples',
      model_aggregator=model_aggregator)
  if fine_tune:
    def adapter(params, support_x, support_y):
      weights, _ = local_training.train_minibatches(
          model.logits, params['weights'], support_x, support_y, client_optimizer,
          hp.finetune_epochs, hp.batch_size)
      return weights
  else:
    adapter = personalized.no_adaptation
  evaluate = personalized.build_personalized_evaluation(model, proc.params_type, adapter)
  return base.Algorithm(name=name, display_name=display_name, process=proc,
                        evaluate=evaluate, train_data='full',
                        client_flops=flops.client_flops_fn(name, model, hp))


base.ALGORITHMS.add('fedavg', functools.partial(
    _build, fine_tune=False, name='fedavg', display_name='FedAvg'))
base.ALGORITHMS.add('fedavg_meta', functools.partial(
    _build, fine_tune=True, name='fedavg_meta', display_name='FedAvg(Meta)'))
