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

FLOPs of a client's round (`round_flops`): E n (F + B_F) + steps c_opt P, with
steps = E ceil(n / B) local optimizer steps (`evaluation.flops`).

Client work type signature:
    (<weights=float32[...]...>, <x=X[?,...], y=int32[?]>)
      -> <weighted_update, weight, metrics, num_clients, num_rejected>
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math

import tensorflow as tf

from tff_meta.algorithms import base, hparams, process
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


@dataclasses.dataclass(frozen=True)
class FedAvgHparams(hparams.LocalTraining, hparams.FedAvgServer):
  """FedAvg's local training and server step."""


@dataclasses.dataclass(frozen=True)
class FedAvgMetaHparams(FedAvgHparams):
  """FedAvg's, plus the fine-tuning at evaluation."""
  finetune_epochs: int = hparams.field(
      1, 'FedAvg(Meta) fine-tuning epochs on the support set at evaluation.', hparams.at_least(0))


def local_training_flops(hp: hparams.LocalTraining, cost: flops.ModelCost, num_examples: int,
                         per_step: int = 0) -> int:
  """E n (F + B_F) + steps (c_opt + per_step) P-FLOPs: `local_epochs` epochs of minibatch
  training on n examples, steps = E ceil(n / B) optimizer steps (`flops` module docstring);
  `per_step` FLOPs more per step (a proximal term's value and gradient)."""
  steps = hp.local_epochs * math.ceil(num_examples / hp.batch_size)
  return (hp.local_epochs * num_examples * cost.train_step
          + steps * (flops.optimizer_step_flops(hp.client_optimizer, cost.params) + per_step))


def round_flops(hp: FedAvgHparams, cost: flops.ModelCost, num_support: int, num_query: int,
                num_examples: int) -> int:
  """FedAvg and FedAvg(Meta) (the same training): `local_training_flops`."""
  del num_support, num_query
  return local_training_flops(hp, cost, num_examples)


def minibatch_adapter(model, optimizer, epochs: int, batch_size: int) -> personalized.Adapter:
  """Evaluation: `epochs` epochs of minibatch training from the global model on the support
  set (FedAvg(Meta)'s fine-tuning; Reptile's U_i^tau)."""

  def adapter(params, support_x, support_y):
    weights, _ = local_training.train_minibatches(
        model.logits, params['weights'], support_x, support_y, optimizer, epochs, batch_size)
    return weights

  return adapter


def _build(model, hp: FedAvgHparams, *, fine_tune: bool, model_aggregator=None):
  """FedAvg; with `fine_tune` (hp: FedAvgMetaHparams), FedAvg(Meta)."""
  client_optimizer = base.client_optimizer(hp)
  proc = build_fedavg_process(
      model, client_optimizer=client_optimizer, server_optimizer=base.fedavg_server_optimizer(hp),
      local_epochs=hp.local_epochs, batch_size=hp.batch_size,
      weighting=hp.weighting or 'num_examples',
      model_aggregator=model_aggregator)
  adapter = (minibatch_adapter(model, client_optimizer, hp.finetune_epochs, hp.batch_size)
             if fine_tune else personalized.no_adaptation)
  evaluate = personalized.build_personalized_evaluation(model, proc.params_type, adapter)
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='full')


base.register(
    base.AlgorithmEntry(
        'fedavg', 'FedAvg', FedAvgHparams, functools.partial(_build, fine_tune=False),
        description='FedAvg: local SGD on all of a client\'s data; scored without adaptation',
        source='FedMeta', round_flops=round_flops, scored_also_as='fedavg_meta'),
    base.AlgorithmEntry(
        'fedavg_meta', 'FedAvg(Meta)', FedAvgMetaHparams,
        functools.partial(_build, fine_tune=True),
        description='FedAvg(Meta): FedAvg training, fine-tuned on the support set at evaluation',
        source='FedMeta', round_flops=round_flops))
