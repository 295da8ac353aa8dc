"""Local-only training: every client trains its own model, nothing is shared.

FedEC (Lan et al., "Elastically-Constrained Meta-Learner for Federated Learning") Table 2, row "Local Only"
("isolated training", Sec. 4.3): client i keeps its own model θ_i, which
starts from the common initial weights θ^0 (the seed's, as for every method
in a comparison) and is trained for E = `local_epochs` epochs of minibatches
(`client_optimizer`, `client_lr`, `batch_size`) each time the client is
sampled:

    θ_i <- U_i^E(θ_i)          (the client's state; never leaves the client)

The server model never changes: each client's update is zero (the round
still counts the clients and their examples, and rejects a client whose
training diverged, which then keeps its old model). The broadcast server
params therefore stay θ^0.

Evaluation: a client that was trained (visits > 0) is scored with its own
θ_i; a new client trains θ^0 on its support set for `local_epochs` epochs.

Type signatures (W = model weights, C = <visits=float32, weights=W>):
    client work: (<weights=W>, C, <x=X[?,...], y=int32[?]>) -> <contribution, C>
    process.next, evaluate: see `algorithms.stateful`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import tensorflow as tf

from tff_meta.algorithms import aggregation, base, fedavg, hparams, personal_state
from tff_meta.learning import local_training


def _client_fn(model, optimizer, epochs, batch_size, params, client_state, data):
  trained, stats = local_training.train_minibatches(
      model.logits, client_state['weights'], data['x'], data['y'], optimizer, epochs, batch_size)
  update = collections.OrderedDict(weights=[tf.zeros_like(w) for w in params['weights']])
  new_state = collections.OrderedDict(visits=client_state['visits'], weights=trained)
  return update, tf.size(data['y']), local_training.per_epoch(stats, epochs), new_state


def build_local_only_process(model, *, client_optimizer, local_epochs: int, batch_size: int):
  """The local-only `IterativeProcess` (stateful; see module docstring)."""
  personal_state.check_local_training('Local-only training', local_epochs=local_epochs,
                                      batch_size=batch_size)
  return personal_state.build_process(
      model, personal={'weights': list(model.initial_trainable)},
      client_fn=functools.partial(_client_fn, model, client_optimizer, local_epochs, batch_size),
      # The update is always zero: no server learning, whatever the optimizer.
      server_optimizer=base.build_optimizer('sgd', 1.0), weighting='num_examples')


@dataclasses.dataclass(frozen=True)
class LocalOnlyHparams(hparams.LocalTraining):
  """E = local_epochs of minibatches with the client optimizer; nothing on the server."""


def _build(model, hp: LocalOnlyHparams, model_aggregator=None):
  if model_aggregator is not None:
    raise aggregation.NotApplicableError(
        'Local-only training sends no update (each client\'s model never leaves it), so there '
        'is nothing for differential privacy or secure aggregation to protect; run it without '
        'dp_clip, dp_noise_multiplier and secure_aggregation.')
  optimizer = base.client_optimizer(hp)
  proc = build_local_only_process(model, client_optimizer=optimizer,
                                  local_epochs=hp.local_epochs, batch_size=hp.batch_size)
  return personal_state.build_algorithm(
      model, proc, known=lambda client_state: client_state['weights'],
      new=fedavg.minibatch_adapter(model, optimizer, hp.local_epochs, hp.batch_size))


base.register(base.AlgorithmEntry(
    'local_only', 'Local Only', LocalOnlyHparams, _build,
    description='Local Only: every client trains only its own model; *stateful*', source='FedEC',
    # The same local training as FedAvg's.
    round_flops=fedavg.round_flops))
