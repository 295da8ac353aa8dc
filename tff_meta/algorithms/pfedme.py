"""pFedMe: personalized FL with Moreau envelopes.

T. Dinh, Tran and Nguyen 2020, "Personalized Federated Learning with Moreau
Envelopes", Algorithm 1. Client i's personalized model solves the Moreau
envelope problem around the global model w (Eqs. 2-3):

    theta_i(w) = argmin_theta  f_i(theta) + (lambda/2) ||theta - w||^2.

Client i starts from the broadcast w_t and takes R local steps; step r draws
a minibatch D_r (`learning.minibatch_stream`) and

    theta~ = K gradient steps with rate `pfedme_personal_lr` on
             h~_i(theta; w, D_r) = f~_i(theta; D_r) + (lambda/2) ||theta - w||^2   (Eq. 7)
    w     <- w - eta lambda (w - theta~)                                         (Eq. 8)

The K steps approximate theta_i(w) to the accuracy nu of Eq. 7; as in the
authors' implementation the solver is warm-started from the previous step's
theta~ (theta~ starts at w_t in each round). The client returns
w_t - w_{i,R}; with server SGD at rate beta and uniform weighting the server
step is w_{t+1} = (1 - beta) w_t + beta (1/S) sum_i w_{i,R} (Alg. 1, the
beta-mixing of the global update; beta = 1 is plain averaging).

Personalized evaluation solves the same problem from the global w on the
support set: K (or `eval_inner_steps`) full-batch steps on
f_i(theta; support) + (lambda/2) ||theta - w||^2, and scores theta on the
query set.

Metrics: the loss and accuracy of theta~ on D_r, summed over the R steps.

Hyperparameters: lambda = `pfedme_lambda`, K = `pfedme_inner_steps`, personal
rate = `pfedme_personal_lr`, eta = `pfedme_eta`, R = `local_steps`,
|D| = `batch_size`, beta = `fedavg_server_lr` (with `fedavg_server_optimizer`
= 'sgd').

Client work type signature:
    (<weights=float32[...]...>, <x=X[?,...], y=int32[?]>)
      -> <weighted_update, weight, metrics, num_clients, num_rejected>
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import tensorflow as tf

from tff_meta.algorithms import base, hparams, process
from tff_meta.evaluation import flops, personalized
from tff_meta.learning import inner_loop, local_training, losses, minibatch_stream


def solve_personalized(model, anchor, start, x, y, *, lam, lr, steps):
  """K gradient steps on f(theta; x, y) + (lam/2) ||theta - anchor||^2 from `start` (Eq. 7)."""

  def moreau_loss(theta):
    return (losses.cross_entropy(model.logits(theta, x), y)
            + 0.5 * lam * losses.squared_distance(theta, anchor))

  return inner_loop.sgd_adapt(moreau_loss, start, lr, steps, first_order=True)


def _client_fn(model, lam, personal_lr, inner_steps, eta, local_steps, batch_size, params, data):
  batches = minibatch_stream.batch_groups(data['x'], data['y'], batch_size, 1, local_steps)
  weights = tuple(params['weights'])
  initial = (weights, weights, local_training.zero_stats())

  def step(carry, batch):
    w, theta, stats = carry
    x, y = batch[0][0], batch[1][0]
    theta = solve_personalized(model, w, theta, x, y, lam=lam, lr=personal_lr,
                               steps=inner_steps)
    w = [wi - eta * lam * (wi - ti) for wi, ti in zip(w, theta)]
    batch_stats = losses.batch_stats(model.logits(theta, x), y)
    return tuple(w), tuple(theta), local_training.add_stats(stats, batch_stats)

  trained, _, stats = batches.reduce(initial, step)
  update = collections.OrderedDict(
      weights=local_training.pseudo_gradient(params['weights'], trained))
  return update, tf.size(data['y']), stats


def build_pfedme_process(model, *, lam: float, personal_lr: float, inner_steps: int, eta: float,
                         local_steps: int, batch_size: int, server_optimizer,
                         weighting: str = 'uniform', model_aggregator=None):
  """The pFedMe `IterativeProcess` (see module docstring)."""
  if not lam > 0:
    raise ValueError(f'pFedMe needs pfedme_lambda > 0 (lambda of Eq. 2), got {lam}.')
  if inner_steps < 1:
    raise ValueError(f'pFedMe needs pfedme_inner_steps (K) >= 1, got {inner_steps}.')
  if local_steps < 1:
    raise ValueError(f'pFedMe needs local_steps (R) >= 1, got {local_steps}.')
  if not personal_lr > 0 or not eta > 0:
    raise ValueError(f'pFedMe needs pfedme_personal_lr > 0 and pfedme_eta > 0, '
                     f'got {personal_lr}, {eta}.')
  if batch_size < 1:
    raise ValueError(f'pFedMe needs batch_size >= 1, got {batch_size}.')
  data_spec = collections.OrderedDict(x=model.x_spec, y=tf.TensorSpec([None], tf.int32))
  return process.build_federated_process(
      initial_params=collections.OrderedDict(weights=model.initial_trainable),
      client_fn=functools.partial(_client_fn, model, lam, personal_lr, inner_steps, eta,
                                  local_steps, batch_size),
      client_data_spec=data_spec, server_optimizer=server_optimizer, weighting=weighting,
      model_aggregator=model_aggregator)


def moreau_adapter(model, lam: float, lr: float, steps: int):
  """Evaluation: theta_i solved from the global w on the support set (Eqs. 2-3), as
  `solve_personalized` with the cross-entropy's gradient summed over slices
  (`learning.inner_loop`: the same full-batch steps, in bounded memory)."""

  def adapter(params, support_x, support_y):
    anchor = params['weights']
    slice_loss = lambda theta, x, y: losses.cross_entropy(model.logits(theta, x), y)
    proximal = lambda theta: 0.5 * lam * losses.squared_distance(theta, anchor)
    gradient = lambda theta: inner_loop.mean_gradient(slice_loss, theta, support_x, support_y,
                                                  regularizer=proximal)
    return inner_loop.descend(gradient, anchor, lr, steps)

  return adapter


@dataclasses.dataclass(frozen=True)
class PFedMeHparams(hparams.Base, hparams.EvalSteps, hparams.BatchSize, hparams.LocalSteps,
                    hparams.FedAvgServer):
  """lambda, K, the personal rate, eta, R = local_steps, |D| = batch_size, beta =
  fedavg_server_lr; `eval_inner_steps` steps (-1 = K) at evaluation."""
  pfedme_lambda: float = hparams.field(
      15.0, 'pFedMe lambda: Moreau-envelope regularization weight; > 0.', hparams.above(0))
  pfedme_inner_steps: int = hparams.field(
      5, 'pFedMe K: gradient steps solving the personalized model theta_i; >= 1.',
      hparams.at_least(1))
  pfedme_personal_lr: float = hparams.field(
      0.01, 'pFedMe: learning rate of the K steps solving theta_i.', hparams.above(0))
  pfedme_eta: float = hparams.field(
      0.005, 'pFedMe eta: local learning rate of the local model w (beta = fedavg_server_lr).',
      hparams.above(0))


def round_flops(hp: PFedMeHparams, cost: flops.ModelCost, num_support: int, num_query: int,
                num_examples: int) -> int:
  """Per local step, with b = min(batch_size, n) (`evaluation.flops`): K steps of
  b (F + B_F) + 8P (the proximal term's value and gradient, 6P, and the SGD step, 2P),
  the forward of theta~ on the batch for the metrics, b F, and the update of w, 3P."""
  del num_support, num_query
  p = cost.params
  batch = min(hp.batch_size, num_examples)
  local_steps = hp.local_steps if num_examples else 0
  k = hp.pfedme_inner_steps
  return local_steps * (k * (batch * cost.train_step + 8 * p) + batch * cost.forward + 3 * p)


def _build(model, hp: PFedMeHparams, model_aggregator=None):
  proc = build_pfedme_process(
      model, lam=hp.pfedme_lambda, personal_lr=hp.pfedme_personal_lr,
      inner_steps=hp.pfedme_inner_steps, eta=hp.pfedme_eta, local_steps=hp.local_steps,
      batch_size=hp.batch_size, server_optimizer=base.fedavg_server_optimizer(hp),
      weighting=hp.weighting or 'uniform', model_aggregator=model_aggregator)
  evaluate = personalized.build_personalized_evaluation(
      model, proc.params_type,
      moreau_adapter(model, hp.pfedme_lambda, hp.pfedme_personal_lr,
                     hp.eval_steps(hp.pfedme_inner_steps)))
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='full')


base.register(base.AlgorithmEntry(
    'pfedme', 'pFedMe', PFedMeHparams, _build,
    description='pFedMe (T. Dinh et al. 2020): Moreau-envelope personal models', source='FedEC',
    round_flops=round_flops))
