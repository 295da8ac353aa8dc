"""FedProx: FedAvg whose clients solve a proximal local problem.

Li, Sahu, Zaheer, Sanjabi, Talwalkar and Smith 2020, "Federated Optimization
in Heterogeneous Networks", Algorithm 2 and Eq. 2: client k approximately
minimizes

    h_k(w; w^t) = F_k(w) + (mu/2) ||w - w^t||^2

starting from the broadcast w^t, here with E local epochs of minibatch
training with the client optimizer (the paper's inexact solver); the
proximal term is added to every minibatch loss (`train_minibatches`'
regularizer), so its gradient mu (w - w^t) joins every step. The client
returns w^t - w_k^{t+1}; the server step (SGD at 1.0 = the average of the
local models, Alg. 2 l. 8) uses example-weighted means, as TFF's
`build_weighted_fed_prox` does. mu = 0 is FedAvg. Personalized evaluation scores the global model without adaptation.

Hyperparameters: mu = `prox_mu`; `client_optimizer`, `client_lr`,
`local_epochs`, `batch_size`, `fedavg_server_optimizer`, `fedavg_server_lr`
as for FedAvg.

Relation to TFF's builder (checked in tests/algorithms/test_fedprox.py):
`tff.learning.algorithms.build_weighted_fed_prox` in TFF 0.87 adds
`proximal_strength * (w^t - w)` to each gradient
(`learning/templates/proximal_client_work.py`), the gradient of
-(mu/2) ||w - w^t||^2: the opposite sign of Eq. 2, which pulls the local model
*away* from w^t. Our process therefore equals TFF's after a round only with
the sign of mu flipped; the test checks exactly that (same weights, data and
SGD), and checks our mu > 0 against a plain-TF reference of Eq. 2.

Client work type signature:
    (<weights=float32[...]...>, <x=X[?,...], y=int32[?]>)
      -> <weighted_update, weight, metrics, num_clients, num_rejected>
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import tensorflow as tf

from tff_meta.algorithms import base, fedavg, hparams, process
from tff_meta.evaluation import flops, personalized
from tff_meta.learning import local_training, losses


def _client_fn(model, optimizer, mu, epochs, batch_size, params, data):
  proximal = lambda w, bx, logits: 0.5 * mu * losses.squared_distance(w, params['weights'])
  trained, stats = local_training.train_minibatches(
      model.logits, params['weights'], data['x'], data['y'], optimizer, epochs, batch_size,
      regularizer=proximal)
  update = collections.OrderedDict(
      weights=local_training.pseudo_gradient(params['weights'], trained))
  return update, tf.size(data['y']), local_training.per_epoch(stats, epochs)


def build_fedprox_process(model, *, mu: float, client_optimizer, server_optimizer,
                          local_epochs: int, batch_size: int, weighting: str = 'num_examples',
                          model_aggregator=None):
  """The FedProx `IterativeProcess` (see module docstring)."""
  if not mu >= 0:
    raise ValueError(f'FedProx needs prox_mu >= 0 (mu of Li et al. Eq. 2; 0 = FedAvg), got {mu}.')
  if local_epochs < 1 or batch_size < 1:
    raise ValueError(f'local_epochs and batch_size must be >= 1, got {local_epochs}, {batch_size}.')
  data_spec = collections.OrderedDict(x=model.x_spec, y=tf.TensorSpec([None], tf.int32))
  return process.build_federated_process(
      initial_params=collections.OrderedDict(weights=model.initial_trainable),
      client_fn=functools.partial(_client_fn, model, client_optimizer, mu, local_epochs,
                                  batch_size),
      client_data_spec=data_spec, server_optimizer=server_optimizer, weighting=weighting,
      model_aggregator=model_aggregator)


@dataclasses.dataclass(frozen=True)
class FedProxHparams(hparams.LocalTraining, hparams.FedAvgServer):
  """FedAvg's local training and server step, plus mu."""
  prox_mu: float = hparams.field(
      0.01, 'FedProx mu: weight of the proximal term (mu/2)||w - w_t||^2; >= 0 (0 = FedAvg).',
      hparams.at_least(0), symbol='FedProx mu')


def round_flops(hp: FedProxHparams, cost: flops.ModelCost, num_support: int, num_query: int,
                num_examples: int) -> int:
  """FedAvg's count + 6P per local step for the proximal term (mu/2) ||w - w_t||^2: its value
  (subtract, square, sum) and gradient."""
  del num_support, num_query
  return fedavg.local_training_flops(hp, cost, num_examples, per_step=6 * cost.params)


def _build(model, hp: FedProxHparams, model_aggregator=None):
  proc = build_fedprox_process(
      model, mu=hp.prox_mu, client_optimizer=base.client_optimizer(hp),
      server_optimizer=base.fedavg_server_optimizer(hp), local_epochs=hp.local_epochs,
      batch_size=hp.batch_size, weighting=hp.weighting or 'num_examples',
      model_aggregator=model_aggregator)
  evaluate = personalized.build_personalized_evaluation(
      model, proc.params_type, personalized.no_adaptation)
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='full')


base.register(base.AlgorithmEntry(
    'fedprox', 'FedProx', FedProxHparams, _build,
    description='FedProx (Li et al. 2020): local training with a proximal term μ', source='FedEC',
    round_flops=round_flops))
