"""Small pure-TF pieces shared by the methods that keep a model on each client.

Ditto's v_i, APFL's (v_i, alpha_i) and local-only training's own model all
follow the same evaluation rule (`algorithms.stateful`): a client that took
part in training (visits > 0) is scored with the state it kept; a client never
seen in training builds that state from the broadcast model on its support set.
`known_or_new` is that rule, as one `tf.cond`, so a new client's training runs
only when needed.
`build_process` is the stateful round of these methods: they train on a
client's full data (x, y) and the server holds the model weights;
`build_algorithm` wraps such a process with that evaluation rule.
"""

from __future__ import annotations

import collections
from typing import Callable, Mapping, Optional

import tensorflow as tf

from tff_meta.algorithms import base, stateful


def known_or_new(client_state, known: Callable, new: Callable):
  """`known()` if the client took part in training (visits > 0), else `new()`."""
  return tf.cond(client_state['visits'] > 0.0, known, new)


def check_local_training(name: str, **counts: int) -> None:
  """Raises a ValueError naming the hparam when an epoch or batch count is < 1."""
  for key, value in counts.items():
    if value < 1:
      raise ValueError(f'{name} needs {key} >= 1, got {value}; set [hparams] {key} '
                       f'(or --{key}) to a positive integer.')


def build_process(model, *, personal: Mapping, client_fn: Callable, server_optimizer,
                  weighting: str, extra_params: Optional[Mapping] = None, model_aggregator=None):
  """`stateful.build_stateful_process` with params <weights=W, **extra_params>, data <x, y>.

  `personal` is a new client's state without `visits`.
  """
  params = collections.OrderedDict(weights=model.initial_trainable)
  params.update(extra_params or {})
  data_spec = collections.OrderedDict(x=model.x_spec, y=tf.TensorSpec([None], tf.int32))
  return stateful.build_stateful_process(
      initial_params=params, initial_client_state=stateful.with_visits(personal),
      client_fn=client_fn, client_data_spec=data_spec, server_optimizer=server_optimizer,
      weighting=weighting, model_aggregator=model_aggregator)


def build_algorithm(model, proc, *, known: Callable, new: Callable,
                    finish: Optional[Callable] = None, **fields) -> base.Algorithm:
  """The `base.Algorithm` of such a method: `proc` with the `known_or_new` evaluation.

  A known client's value is `known(client_state)`; a new client's is
  `new(params, support_x, support_y)`, built from the broadcast params on its
  support set. `finish(params, value)` turns the chosen value into the model
  weights scored (by default the value is the weights). The method trains on
  full client data; `fields` are further `base.Algorithm` fields.
  """

  def personalize(params, candidates, client_state, support_x, support_y):
    del candidates
    chosen = known_or_new(client_state, lambda: known(client_state),
                          lambda: new(params, support_x, support_y))
    return chosen if finish is None else finish(params, chosen)

  evaluate = stateful.build_stateful_evaluation(model, proc, personalize, num_candidates=1)
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='full', **fields)
