"""FedEC, its ablations FedEC-l2 and FedEC-wo (Reptile).

Lan et al., "Elastically-Constrained Meta-Learner for Federated Learning"
("Elastically-Constrained Meta-Learner for Federated Learning"), Algorithm 1:
- **Reptile / FedEC-wo** (Eqs. 3-5, 7-8): client i trains φ^{t-1} for τ local
  epochs with rate ε_in on its data, θ_i^{t,τ} = U_i^τ(φ^{t-1}); the server
  moves φ toward the mean adapted model,
  φ^t = φ^{t-1} + ε_out (1/|I^t|) Σ_i (θ_i^{t,τ} - φ^{t-1}).
  Here the client returns φ - θ and the server takes an SGD step of rate
  ε_out (`server_optimizer = "sgd"`, `server_lr` = ε_out), uniform weights.
- **FedEC** (Eqs. 6, 9-11): the inner loss is
  CE(y, θ(x)) + α KL(θ̂_i(x) ‖ θ(x)), θ̂_i being client i's last adapted model,
  kept in the client's state and replaced by θ_i^{t,τ} after each
  participation (Alg. 1, l. 18). On a client's first participation the
  constraint is off (Eq. 6). Eq. 13 rewrites the loss as
  (1+α) CE(q, θ(x)) + const with q = y/(1+α) + α θ̂_i(x)/(1+α); the tests check this.
- **FedEC-l2** (Sec. 4.4): the constraint is (α/2) ||θ - θ̂_i||² instead of the
  KL term (the paper does not give the form; this is the usual elastic L2).

Evaluation (Sec. 4.2.1): "the average acc of the local test set of all
clients": each client's employed model is its inner update from the current
φ on its local training data (the support set), with its constraint, scored
on its local test data. A client never seen in training adapts without
the constraint.

Type signatures (W = model weights, C = <visits=float32, hat=W>):
    Reptile client work: (<weights=W>, <x,y>) -> contribution (process.py)
    FedEC client work: (<weights=W>, C, <x,y>) -> <contribution, C>
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import tensorflow as tf

from tff_meta.algorithms import base, fedavg, hparams, stateful
from tff_meta.evaluation import flops, personalized
from tff_meta.learning import local_training, losses

CONSTRAINTS = ('kl', 'l2')


def constraint_regularizer(model, kind: str, weight, reference):
  """`(w, batch_x, logits) -> weight * c(θ, θ̂)` for `local_training.train_minibatches`."""
  if kind == 'kl':   # Eq. 9: KL(θ̂(x) || θ(x)) on the minibatch
    weight = tf.convert_to_tensor(weight, tf.float32)
    # θ̂'s forward pass only where the term counts: not at weight 0 (a first
    # participation, Eq. 6), where the term is 0.
    return lambda w, bx, logits: tf.cond(
        weight > 0.0,
        lambda: weight * losses.kl_to_reference(model.logits(reference, bx), logits),
        lambda: tf.zeros_like(weight))
  if kind == 'l2':
    return lambda w, bx, logits: 0.5 * weight * losses.squared_distance(w, reference)
  raise ValueError(f'Unknown FedEC constraint {kind!r}; use one of {CONSTRAINTS}.')


def inner_update(model, optimizer, epochs, batch_size, kind, alpha, weights, client_state, x, y):
  """InnerUpdate_i (Alg. 1, ll. 11-17): τ epochs from φ with the constraint if θ̂_i exists."""
  # Eq. 6: the constraint is 0 until the client has been trained once.
  weight = alpha * tf.minimum(client_state['visits'], 1.0)
  regularizer = constraint_regularizer(model, kind, weight, client_state['hat'])
  return local_training.train_minibatches(
      model.logits, weights, x, y, optimizer, epochs, batch_size, regularizer=regularizer)


def _client_fn(model, optimizer, epochs, batch_size, kind, alpha, params, client_state, data):
  trained, stats = inner_update(model, optimizer, epochs, batch_size, kind, alpha,
                                params['weights'], client_state, data['x'], data['y'])
  update = collections.OrderedDict(
      weights=local_training.pseudo_gradient(params['weights'], trained))
  new_state = collections.OrderedDict(visits=client_state['visits'], hat=trained)
  return update, tf.size(data['y']), local_training.per_epoch(stats, epochs), new_state


@dataclasses.dataclass(frozen=True)
class FedECHparams(hparams.LocalTraining, hparams.MetaServer):
  """tau = local_epochs, eps_in = client_lr, eps_out = server_lr (with server_optimizer = 'sgd'),
  alpha = constraint_weight; one dataclass for FedEC, FedEC-l2 and FedEC-wo (Reptile)."""
  constraint_weight: float = hparams.field(
      1.0, 'FedEC alpha: weight of the KL constraint to the client\'s last adapted model '
      '(FedEC-l2: of the L2 constraint); >= 0.', hparams.at_least(0))

  def validate(self) -> None:
    if self.local_epochs < 1:
      raise ValueError(f'FedEC needs tau = local_epochs >= 1, got {self.local_epochs}.')
    if self.constraint_weight < 0:
      raise ValueError(f'FedEC needs alpha = constraint_weight >= 0, got '
                       f'{self.constraint_weight}.')


def round_flops(constraint: str, hp: FedECHparams, cost: flops.ModelCost, num_support: int,
                num_query: int, num_examples: int) -> int:
  """FedAvg's local training (`fedavg.local_training_flops`) plus the constraint's cost.

  - Reptile (no constraint): nothing more.
  - FedEC (KL, Eq. 9): the forward pass of the client's last adapted model
    θ̂_i on every minibatch, E n F (no backward: θ̂_i is a constant). This
    is an upper bound: on a client's first participation (Eq. 6) the term is
    0 and that forward pass is skipped, which the round data do not show.
  - FedEC-l2: (α/2) ||θ - θ̂_i||²'s value and gradient, 6P per local step
    (as FedProx's proximal term).
  """
  del num_support, num_query
  if constraint == 'l2':
    return fedavg.local_training_flops(hp, cost, num_examples, per_step=6 * cost.params)
  total = fedavg.local_training_flops(hp, cost, num_examples)
  if constraint == 'kl':
    total += hp.local_epochs * num_examples * cost.forward
  return total


def build_fedec_process(model, *, constraint: str, alpha: float, client_optimizer,
                        server_optimizer, local_epochs: int, batch_size: int,
                        weighting: str = 'uniform', model_aggregator=None):
  """The FedEC `IterativeProcess` (stateful; see module docstring)."""
  if constraint not in CONSTRAINTS:
    raise ValueError(f'Unknown FedEC constraint {constraint!r}; use one of {CONSTRAINTS}.')
  data_spec = collections.OrderedDict(x=model.x_spec, y=tf.TensorSpec([None], tf.int32))
  return stateful.build_stateful_process(
      initial_params=collections.OrderedDict(weights=model.initial_trainable),
      initial_client_state=stateful.with_visits({'hat': list(model.initial_trainable)}),
      client_fn=functools.partial(_client_fn, model, client_optimizer, local_epochs, batch_size,
                                  constraint, alpha),
      client_data_spec=data_spec, server_optimizer=server_optimizer, weighting=weighting,
      model_aggregator=model_aggregator)


def _build_fedec(model, hp: FedECHparams, *, constraint: str, model_aggregator=None):
  optimizer = base.client_optimizer(hp)
  proc = build_fedec_process(
      model, constraint=constraint, alpha=hp.constraint_weight, client_optimizer=optimizer,
      server_optimizer=base.meta_server_optimizer(hp), local_epochs=hp.local_epochs,
      batch_size=hp.batch_size, weighting=hp.weighting or 'uniform',
      model_aggregator=model_aggregator)

  def personalize(params, candidates, client_state, support_x, support_y):
    del candidates
    weights, _ = inner_update(model, optimizer, hp.local_epochs, hp.batch_size, constraint,
                              hp.constraint_weight, params['weights'], client_state,
                              support_x, support_y)
    return weights

  evaluate = stateful.build_stateful_evaluation(model, proc, personalize, num_candidates=1)
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='full')


def _build_reptile(model, hp: FedECHparams, model_aggregator=None):
  optimizer = base.client_optimizer(hp)
  proc = fedavg.build_fedavg_process(
      model, client_optimizer=optimizer, server_optimizer=base.meta_server_optimizer(hp),
      local_epochs=hp.local_epochs, batch_size=hp.batch_size, weighting=hp.weighting or 'uniform',
      model_aggregator=model_aggregator)
  # U_i^tau(phi), unconstrained
  adapter = fedavg.minibatch_adapter(model, optimizer, hp.local_epochs, hp.batch_size)
  evaluate = personalized.build_personalized_evaluation(model, proc.params_type, adapter)
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='full')


base.register(
    base.AlgorithmEntry(
        'reptile', 'FedEC-wo (Reptile)', FedECHparams, _build_reptile,
        description='FedEC-wo / Reptile: first-order outer step toward the adapted models',
        source='FedEC', round_flops=functools.partial(round_flops, '')),
    base.AlgorithmEntry(
        'fedec', 'FedEC', FedECHparams, functools.partial(_build_fedec, constraint='kl'),
        description='FedEC: Reptile with a KL constraint to the client\'s last adapted model; '
        '*stateful*', source='FedEC', round_flops=functools.partial(round_flops, 'kl')),
    base.AlgorithmEntry(
        'fedec_l2', 'FedEC-l2', FedECHparams, functools.partial(_build_fedec, constraint='l2'),
        description='FedEC-l2: the same with an L2 constraint; *stateful*', source='FedEC',
        round_flops=functools.partial(round_flops, 'l2')))
