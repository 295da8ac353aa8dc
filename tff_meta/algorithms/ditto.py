"""Ditto: a global model trained as FedAvg, plus a proximal personal model per client.

Li, Hu, Beirami and Smith 2021, "Ditto: Fair and Robust Federated Learning
Through Personalization", Algorithm 1 (a peer method of FedEC,
"Elastically-Constrained Meta-Learner for Federated Learning", Sec. 2). Each round, a sampled client k

1. trains the broadcast global model w^t with the local solver (FedAvg's
   local training: `local_epochs` epochs of minibatches, `client_optimizer`,
   `client_lr`, `batch_size`) and returns w^t - w_k (Alg. 1, ll. 4-5); the
   server applies the mean through `fedavg_server_optimizer` at
   `fedavg_server_lr` (SGD at 1.0 = the average of the local models, l. 7),
   weighted by examples as FedAvg (`weighting` overrides);
2. trains its personal model v_k for `personal_epochs` epochs on
       h_k(v; w^t) = F_k(v) + (λ/2) ||v - w^t||²            (Eq. 2, ll. 6-7)
   with the same local optimizer, λ = `ditto_lambda`, and keeps v_k.

v_k starts from the initial weights w^0 (Alg. 1 input). Evaluation: a
client that took part in training is scored with its own v_k; a new client
starts v from the current w and trains it on its support set for
`personal_epochs` epochs with the same proximal term.

Type signatures (W = model weights, C = <visits=float32, personal=W>):
    client work: (<weights=W>, C, <x=X[?,...], y=int32[?]>) -> <contribution, C>
    process.next, evaluate: see `algorithms.stateful`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

from tff_meta.algorithms import base, fedavg, hparams, personal_state
from tff_meta.learning import local_training, losses


def personal_update(model, optimizer, epochs, batch_size, lam, global_weights, personal, x, y):
  """Alg. 1, ll. 6-7: `epochs` epochs on F_k(v) + (λ/2)||v - w^t||², from `personal`."""
  proximal = lambda w, bx, logits: 0.5 * lam * losses.squared_distance(w, global_weights)
  trained, _ = local_training.train_minibatches(
      model.logits, personal, x, y, optimizer, epochs, batch_size, regularizer=proximal)
  return trained


def _client_fn(model, optimizer, epochs, personal_epochs, batch_size, lam,
               params, client_state, data):
  update, num_examples, stats = fedavg._client_fn(  # pylint: disable=protected-access
      model, optimizer, epochs, batch_size, params, data)
  personal = personal_update(model, optimizer, personal_epochs, batch_size, lam,
                             params['weights'], client_state['personal'], data['x'], data['y'])
  new_state = collections.OrderedDict(visits=client_state['visits'], personal=personal)
  return update, num_examples, stats, new_state


def validate(lam: float, local_epochs: int, personal_epochs: int, batch_size: int) -> None:
  if not lam >= 0:
    raise ValueError(f'Ditto needs lambda = ditto_lambda >= 0, got {lam}; set [hparams] '
                     'ditto_lambda (or --ditto_lambda) to 0 (local training) or more.')
  personal_state.check_local_training('Ditto', local_epochs=local_epochs,
                                      personal_epochs=personal_epochs, batch_size=batch_size)


def build_ditto_process(model, *, lam: float, client_optimizer, server_optimizer,
                        local_epochs: int, personal_epochs: int, batch_size: int,
                        weighting: str = 'num_examples', model_aggregator=None):
  """The Ditto `IterativeProcess` (stateful; see module docstring)."""
  validate(lam, local_epochs, personal_epochs, batch_size)
  return personal_state.build_process(
      model, personal={'personal': list(model.initial_trainable)},
      client_fn=functools.partial(_client_fn, model, client_optimizer, local_epochs,
                                  personal_epochs, batch_size, lam),
      server_optimizer=server_optimizer, weighting=weighting, model_aggregator=model_aggregator)


@dataclasses.dataclass(frozen=True)
class DittoHparams(hparams.LocalTraining, hparams.FedAvgServer):
  """FedAvg's local training and server step; the personal model's epochs and lambda."""
  personal_epochs: int = hparams.field(
      1, 'Ditto: local epochs on the personal model per round.', hparams.at_least(0))
  ditto_lambda: float = hparams.field(
      0.1, 'Ditto lambda: weight of the proximal term to the global model.', hparams.at_least(0))


def _build(model, hp: DittoHparams, model_aggregator=None):
  optimizer = base.client_optimizer(hp)
  proc = build_ditto_process(
      model, lam=hp.ditto_lambda, client_optimizer=optimizer,
      server_optimizer=base.fedavg_server_optimizer(hp), local_epochs=hp.local_epochs,
      personal_epochs=hp.personal_epochs, batch_size=hp.batch_size,
      weighting=hp.weighting or 'num_examples', model_aggregator=model_aggregator)

  def new(params, support_x, support_y):
    return personal_update(model, optimizer, hp.personal_epochs, hp.batch_size, hp.ditto_lambda,
                           params['weights'], params['weights'], support_x, support_y)

  return personal_state.build_algorithm(
      model, proc, new=new,
      known=lambda client_state: client_state['personal'])


base.register(base.AlgorithmEntry(
    'ditto', 'Ditto', DittoHparams, _build,
    description='Ditto (Li et al. 2021): a regularized personal model per client; *stateful*',
    source='FedEC'))
