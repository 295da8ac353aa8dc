"""APFL: adaptive personalized federated learning (a learned mix of a personal and the global model).

Deng, Kamani and Mahdavi 2020, "Adaptive Personalized Federated Learning",
Algorithm 1 with the adaptive mixing weight (Sec. 3.3, Eq. 10); a peer method
of FedEC ("Elastically-Constrained Meta-Learner for Federated Learning", Table 2, row "APFL"). Client i keeps a
personal model v_i and a mixing weight α_i; its personalized model is

    v̄_i = α_i v_i + (1 - α_i) w.

Each local step on a minibatch ξ (from the broadcast w, for `local_epochs`
epochs of minibatches of `batch_size`) updates, all at the old values:

    w   <- w   - η ∇f_i(w; ξ)                     (Alg. 1, local model)
    v_i <- v_i - η ∇_v f_i(v̄_i; ξ)                 (Alg. 1, personal model)
    α_i <- α_i - η ∇_α f_i(v̄_i; ξ),  clipped to [0, 1]   (Eq. 10)

with ∇_v f(v̄) = α ∇f(v̄) and ∇_α f(v̄) = <v - w, ∇f(v̄)>. One
`local_training.train_minibatches` call does the three at once on the packed
list (w, v, α) with the loss CE(w(ξ)) + CE(v̄(ξ)) where v̄ uses a stopped
gradient of w: its gradients are exactly those three. The step is the client
optimizer (`client_optimizer`, η = `client_lr`; the paper's is SGD), with α
clipped after each step. The client returns w^t - w_i; the server averages
uniformly over the sampled clients (Alg. 1, w = (1/|U|) Σ w_j; `weighting`
overrides) through `fedavg_server_optimizer` at `fedavg_server_lr` (SGD at
1.0 = the average). v_i starts from the initial weights w^0 and α_i from
`apfl_alpha`.

Evaluation: a client that took part in training is scored with
α_i v_i + (1 - α_i) w, w being the current global model. A new client
(decision here; the paper evaluates training clients only) runs the same
local steps on its support set from (w, v = w, α = `apfl_alpha`) and is
scored with α' v' + (1 - α') w.

Type signatures (W = model weights, C = <visits=float32, personal=W, alpha=float32>):
    client work: (<weights=W>, C, <x=X[?,...], y=int32[?]>) -> <contribution, C>
    process.next, evaluate: see `algorithms.stateful`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms import base, hparams, personal_state
from tff_meta.learning import local_training, losses


class ClipLastToUnit(tff.learning.optimizers.Optimizer):
  """Steps with `optimizer`, then clips the last tensor (α) to [0, 1]."""

  def __init__(self, optimizer):
    self._optimizer = optimizer

  def initialize(self, specs):
    return self._optimizer.initialize(specs)

  def next(self, state, weights, gradients):
    state, weights = self._optimizer.next(state, weights, gradients)
    weights = list(weights)
    weights[-1] = tf.clip_by_value(weights[-1], 0.0, 1.0)
    return state, tuple(weights)


def mix(alpha, personal, global_weights):
  """v̄ = α v + (1 - α) w."""
  return [alpha * v + (1.0 - alpha) * w for v, w in zip(personal, global_weights)]


def local_update(model, optimizer, epochs, batch_size, weights, personal, alpha, x, y):
  """Alg. 1's local steps; returns (w, v, α, training sums of the personalized model)."""
  k = len(weights)

  def mixed_logits(packed, batch):   # v̄(ξ); only v and α get its gradient
    w_fixed = [tf.stop_gradient(w) for w in packed[:k]]
    return model.logits(mix(packed[2 * k], packed[k:2 * k], w_fixed), batch[0])

  def global_loss(packed, batch, logits):   # f(w; ξ): the data carry their labels
    del logits
    return losses.cross_entropy(model.logits(packed[:k], batch[0]), batch[1])

  packed = list(weights) + list(personal) + [alpha]
  trained, stats = local_training.train_minibatches(
      mixed_logits, packed, (x, y), y, ClipLastToUnit(optimizer), epochs, batch_size,
      regularizer=global_loss)
  return trained[:k], trained[k:2 * k], trained[2 * k], stats


def _client_fn(model, optimizer, epochs, batch_size, params, client_state, data):
  w, v, alpha, stats = local_update(model, optimizer, epochs, batch_size, params['weights'],
                                    client_state['personal'], client_state['alpha'],
                                    data['x'], data['y'])
  update = collections.OrderedDict(weights=local_training.pseudo_gradient(params['weights'], w))
  new_state = collections.OrderedDict(visits=client_state['visits'], personal=v, alpha=alpha)
  return update, tf.size(data['y']), local_training.per_epoch(stats, epochs), new_state


def validate(alpha: float, local_epochs: int, batch_size: int) -> None:
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f'APFL needs the initial mixing weight apfl_alpha in [0, 1], got {alpha}; '
                     'set [hparams] apfl_alpha (or --apfl_alpha).')
  personal_state.check_local_training('APFL', local_epochs=local_epochs, batch_size=batch_size)


def build_apfl_process(model, *, alpha: float, client_optimizer, server_optimizer,
                       local_epochs: int, batch_size: int, weighting: str = 'uniform',
                       model_aggregator=None):
  """The APFL `IterativeProcess` (stateful; see module docstring)."""
  validate(alpha, local_epochs, batch_size)
  return personal_state.build_process(
      model, personal={'personal': list(model.initial_trainable), 'alpha': np.float32(alpha)},
      client_fn=functools.partial(_client_fn, model, client_optimizer, local_epochs, batch_size),
      server_optimizer=server_optimizer, weighting=weighting, model_aggregator=model_aggregator)


@dataclasses.dataclass(frozen=True)
class APFLHparams(hparams.LocalTraining, hparams.FedAvgServer):
  """eta = client_lr with the client optimizer; the initial alpha_i."""
  apfl_alpha: float = hparams.field(
      0.5, 'APFL: initial mixing weight of the personal model (learned per client).',
      hparams.between(0, 1))


def _build(model, hp: APFLHparams, model_aggregator=None):
  optimizer = base.client_optimizer(hp)
  proc = build_apfl_process(
      model, alpha=hp.apfl_alpha, client_optimizer=optimizer,
      server_optimizer=base.fedavg_server_optimizer(hp), local_epochs=hp.local_epochs,
      batch_size=hp.batch_size, weighting=hp.weighting or 'uniform',
      model_aggregator=model_aggregator)

  def new(params, support_x, support_y):
    w = params['weights']
    _, v, alpha, _ = local_update(model, optimizer, hp.local_epochs, hp.batch_size, w, w,
                                  tf.constant(hp.apfl_alpha, tf.float32), support_x, support_y)
    return v + [alpha]

  return personal_state.build_algorithm(
      model, proc, new=new,
      known=lambda client_state: client_state['personal'] + [client_state['alpha']],
      finish=lambda params, chosen: mix(chosen[-1], chosen[:-1], params['weights']))


base.register(base.AlgorithmEntry(
    'apfl', 'APFL', APFLHparams, _build,
    description='APFL (Deng et al. 2020): personal model mixed with the global one; *stateful*',
    source='FedEC'))
