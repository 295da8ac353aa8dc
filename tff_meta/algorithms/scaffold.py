"""SCAFFOLD: stochastic controlled averaging (control variates against client drift).

Karimireddy, Kale, Mohri, Reddi, Stich and Suresh 2020, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", Algorithm 1 with option II; a
peer method of FedEC ("Elastically-Constrained Meta-Learner for Federated Learning", Table 2, row "SCAFFOLD").
The server holds the model x and the control variate c; client i keeps its
control variate c_i (zeros at first). A sampled client i

    y_i <- x; K local steps   y_i <- y_i - η_l (g_i(y_i) - c_i + c)      (l. 10)
    c_i+ = c_i - c + (x - y_i) / (K η_l)                              (l. 12, option II)
    sends (Δy_i, Δc_i) = (y_i - x, c_i+ - c_i); keeps c_i <- c_i+      (ll. 13-14)

and the server, with global rate η_g,

    x <- x + η_g (1/|S|) Σ_S Δy_i,    c <- c + (1/N) Σ_S Δc_i = c + (|S|/N) mean_S Δc_i.

Here: the local steps are `local_epochs` epochs of minibatches of
`batch_size` (K = epochs × ⌈n_i / batch_size⌉), plain SGD at η_l =
`client_lr`; the correction -c_i + c is the gradient of the linear term
Σ <y, c - c_i> that `local_training.train_minibatches` adds to each
minibatch loss. The client sends x - y_i for `weights` and
-(|S|/N) Δc_i / η_g for `control`; the server takes one SGD step of rate
η_g = `fedavg_server_lr` on the uniform mean (`weighting` overrides), which
gives both lines above exactly. The server optimizer must therefore be SGD
(another one would distort the control variate; that is a ValueError).

N = `population` (the number of training clients; the program fills it from
the data) and |S| = `sampled_clients` (the clients sampled per round, i.e.
the run's `clients_per_round`). Both are fixed when the process is built,
since a client cannot see the round's size. A round's mean runs over the
clients it accepted (`process.contribution`), so when a client's update is
rejected (not finite) the control step uses |S| accepted clients as if all
had been; this is the only deviation from Alg. 1. Built outside the program,
both must be given: 0 is a ValueError, as is |S| > N.

Evaluation: the global model x, without adaptation (SCAFFOLD is not a
personalized method; Table 2 scores it this way).

Type signatures (W = model weights, P = <weights=W, control=W>,
C = <visits=float32, control=W>):
    client work: (P, C, <x=X[?,...], y=int32[?]>) -> <contribution, C>
    process.next, evaluate: see `algorithms.stateful`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import numpy as np
import tensorflow as tf

from tff_meta.algorithms import base, hparams, personal_state, stateful
from tff_meta.learning import local_training


def local_steps(num_examples, epochs: int, batch_size: int) -> tf.Tensor:
  """K: the minibatch steps `train_minibatches` takes on `num_examples` examples."""
  batches = (tf.cast(num_examples, tf.int32) + batch_size - 1) // batch_size
  return tf.cast(epochs * batches, tf.float32)


def _client_fn(model, client_lr, epochs, batch_size, control_factor, params, client_state, data):
  x, c, c_i = params['weights'], params['control'], client_state['control']
  correction = [g - own for g, own in zip(c, c_i)]   # c - c_i
  linear = lambda w, bx, logits: tf.add_n(
      [tf.reduce_sum(wj * tf.stop_gradient(d)) for wj, d in zip(w, correction)])
  y, stats = local_training.train_minibatches(
      model.logits, x, data['x'], data['y'], base.build_optimizer('sgd', client_lr), epochs,
      batch_size, regularizer=linear)
  num_examples = tf.size(data['y'])
  k = tf.maximum(local_steps(num_examples, epochs, batch_size), 1.0)   # no steps: rejected anyway
  new_c_i = [own - g + (xj - yj) / (k * client_lr) for own, g, xj, yj in zip(c_i, c, x, y)]
  update = collections.OrderedDict(
      weights=[xj - yj for xj, yj in zip(x, y)],
      control=[-control_factor * (new - own) for new, own in zip(new_c_i, c_i)])
  new_state = collections.OrderedDict(visits=client_state['visits'], control=new_c_i)
  return update, num_examples, local_training.per_epoch(stats, epochs), new_state


def validate(population: int, sampled_clients: int, server_optimizer: str = 'sgd') -> None:
  if population < 1:
    raise ValueError(f'SCAFFOLD needs N = population >= 1 (the number of training clients), got '
                     f'{population}; the training program fills it from the data, otherwise set '
                     '[hparams] population (or --population).')
  if sampled_clients < 1 or sampled_clients > population:
    raise ValueError(f'SCAFFOLD needs |S| = sampled_clients in [1, population={population}] (the '
                     f'clients sampled per round), got {sampled_clients}; set [hparams] '
                     'sampled_clients (or --sampled_clients) to the run\'s clients_per_round.')
  if server_optimizer != 'sgd':
    raise ValueError(f'SCAFFOLD\'s server step (Alg. 1, ll. 16-17) is SGD at the global rate '
                     f'fedavg_server_lr; got fedavg_server_optimizer={server_optimizer!r}. Set '
                     '[hparams] fedavg_server_optimizer = "sgd" (e.g. in [method_hparams.scaffold]).')


def build_scaffold_process(model, *, client_lr: float, server_lr: float, local_epochs: int,
                           batch_size: int, population: int, sampled_clients: int,
                           weighting: str = 'uniform', model_aggregator=None):
  """The SCAFFOLD `IterativeProcess` (stateful; see module docstring)."""
  validate(population, sampled_clients)
  personal_state.check_local_training('SCAFFOLD', local_epochs=local_epochs,
                                      batch_size=batch_size)
  if not (client_lr > 0 and server_lr > 0):
    raise ValueError(f'SCAFFOLD needs client_lr > 0 and fedavg_server_lr > 0, got {client_lr}, '
                     f'{server_lr}.')
  zeros = [np.zeros_like(w, np.float32) for w in model.initial_trainable]
  # The server's SGD step at eta_g on -(|S|/N) dc_i / eta_g is c + (|S|/N) mean dc_i.
  control_factor = sampled_clients / population / server_lr
  return personal_state.build_process(
      model, personal={'control': zeros}, extra_params={'control': zeros},
      client_fn=functools.partial(_client_fn, model, client_lr, local_epochs, batch_size,
                                  control_factor),
      server_optimizer=base.build_optimizer('sgd', server_lr), weighting=weighting,
      model_aggregator=model_aggregator)


@dataclasses.dataclass(frozen=True)
class ScaffoldHparams(hparams.LocalTraining, hparams.FedAvgServer):
  """eta_l = client_lr (plain SGD), eta_g = fedavg_server_lr (SGD), N and |S|."""
  population: int = hparams.field(
      0, 'N, the number of training clients (SCAFFOLD\'s |S|/N); 0 = counted from the data.',
      hparams.at_least(0))
  sampled_clients: int = hparams.field(
      0, '|S|, the clients sampled per round (SCAFFOLD\'s |S|/N); 0 = clients_per_round (filled '
      'by the program).', hparams.at_least(0))

  def validate(self) -> None:
    validate(self.population, self.sampled_clients, self.fedavg_server_optimizer)
    if self.client_optimizer != 'sgd':
      raise ValueError(f'SCAFFOLD\'s local step (Alg. 1, l. 10) and option-II control update are '
                       f'plain SGD; got client_optimizer={self.client_optimizer!r}. Set [hparams] '
                       'client_optimizer = "sgd" (e.g. in [method_hparams.scaffold]).')

  def for_run(self, *, num_train_clients: int, clients_per_round: int) -> 'ScaffoldHparams':
    """N from the data and |S| from the run, where the config left them 0."""
    population = self.population or num_train_clients
    sampled = self.sampled_clients or (min(clients_per_round, population) if population else 0)
    return dataclasses.replace(self, population=population, sampled_clients=sampled)


def _build(model, hp: ScaffoldHparams, model_aggregator=None):
  proc = build_scaffold_process(
      model, client_lr=hp.client_lr, server_lr=hp.fedavg_server_lr,
      local_epochs=hp.local_epochs, batch_size=hp.batch_size, population=hp.population,
      sampled_clients=hp.sampled_clients, weighting=hp.weighting or 'uniform',
      model_aggregator=model_aggregator)

  def personalize(params, candidates, client_state, support_x, support_y):
    del candidates, client_state, support_x, support_y
    return params['weights']

  evaluate = stateful.build_stateful_evaluation(model, proc, personalize, num_candidates=1)
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='full')


base.register(base.AlgorithmEntry(
    'scaffold', 'SCAFFOLD', ScaffoldHparams, _build,
    description='SCAFFOLD (Karimireddy et al. 2020): control variates; *stateful*',
    source='FedEC'))
