"""Per-FedAvg, first-order (FO) and Hessian-free (HF) variants.

Fallah, Mokhtari and Ozdaglar 2020, "Personalized Federated Learning with
Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach", Algorithm 1.
The meta-objective is F(w) = (1/n) sum_i f_i(w - alpha grad f_i(w)) (Eq. 3).
Client i starts from the broadcast w_k and takes tau local steps; step t draws
independent minibatches D_t, D'_t, D''_t (consecutive batches of the client's
round-shuffled data, `learning.minibatch_stream`) and computes

    w~   = w - alpha grad f_i(w, D_t)                        (Alg. 1, l. 6)
    g    = grad f_i(w~, D'_t)
    FO:  w <- w - beta g                                     (Sec. 5, Per-FedAvg (FO))
    HF:  d = [grad f_i(w + delta g, D''_t) - grad f_i(w - delta g, D''_t)] / (2 delta)
         w <- w - beta (g - alpha d)                         (Sec. 5, Per-FedAvg (HF))

`d` is the central finite-difference approximation of the Hessian-vector
product grad^2 f_i(w, D''_t) g, so HF follows the exact update
w - beta (I - alpha grad^2 f_i(w, D'')) g (Alg. 1, l. 7) without second-order
derivatives. The client returns w_k - w_{k,tau}; the server step with SGD at
rate 1.0 and uniform weighting is the paper's average w_{k+1} = (1/rn) sum_i
w_{k+1,tau}^i (Alg. 1, l. 10). Personalization (evaluation) is the paper's
one step (or `eval_inner_steps` steps) of gradient descent with rate alpha on
the client's support set.

Metrics: the loss and accuracy of the adapted w~ on the D'_t batches, summed
over the tau steps.

Hyperparameters: alpha = `inner_lr`, beta = `per_fedavg_beta`,
tau = `local_steps`, |D| = `batch_size`, delta = `hf_delta`.

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

VARIANTS = ('fo', 'hf')


def loss_gradient(model, weights, x, y):
  """(gradient of the mean cross-entropy on (x, y) at `weights`, logits)."""
  weights = list(weights)
  with tf.GradientTape() as tape:
    tape.watch(weights)
    logits = model.logits(weights, x)
    loss = losses.cross_entropy(logits, y)
  return inner_loop.dense(tape.gradient(loss, weights)), logits


def finite_difference_hvp(grad_fn, weights, vector, delta):
  """[grad_fn(w + delta v) - grad_fn(w - delta v)] / (2 delta) ~ grad^2 f(w) v."""
  plus = grad_fn([w + delta * v for w, v in zip(weights, vector)])
  minus = grad_fn([w - delta * v for w, v in zip(weights, vector)])
  return [(p - m) / (2.0 * delta) for p, m in zip(plus, minus)]


def local_step(model, variant, alpha, beta, delta, weights, xs, ys):
  """One Per-FedAvg local step on the batches xs[0..2], ys[0..2]: (new weights, stats)."""
  grad, _ = loss_gradient(model, weights, xs[0], ys[0])
  adapted = [w - alpha * g for w, g in zip(weights, grad)]
  meta_grad, logits = loss_gradient(model, adapted, xs[1], ys[1])
  if variant == 'hf':
    hvp = finite_difference_hvp(
        lambda w: loss_gradient(model, w, xs[2], ys[2])[0], weights, meta_grad, delta)
    meta_grad = [g - alpha * h for g, h in zip(meta_grad, hvp)]
  new_weights = [w - beta * g for w, g in zip(weights, meta_grad)]
  return new_weights, losses.batch_stats(logits, ys[1])


def _client_fn(model, variant, alpha, beta, delta, local_steps, batch_size, params, data):
  group = 3 if variant == 'hf' else 2
  batches = minibatch_stream.batch_groups(data['x'], data['y'], batch_size, group, local_steps)
  initial = (tuple(params['weights']), local_training.zero_stats())

  def step(carry, batch):
    weights, stats = carry
    weights, batch_stats = local_step(model, variant, alpha, beta, delta, weights, *batch)
    return tuple(weights), local_training.add_stats(stats, batch_stats)

  trained, stats = batches.reduce(initial, step)
  update = collections.OrderedDict(
      weights=local_training.pseudo_gradient(params['weights'], trained))
  return update, tf.size(data['y']), stats


def build_per_fedavg_process(model, *, variant: str, alpha: float, beta: float,
                             local_steps: int, batch_size: int, server_optimizer,
                             delta: float = 0.001, weighting: str = 'uniform',
                             model_aggregator=None):
  """The Per-FedAvg `IterativeProcess` for `variant` in ('fo', 'hf')."""
  if variant not in VARIANTS:
    raise ValueError(f'Unknown Per-FedAvg variant {variant!r}; use one of {VARIANTS}.')
  if not alpha > 0 or not beta > 0:
    raise ValueError(f'Per-FedAvg needs alpha (inner_lr) > 0 and beta (per_fedavg_beta) > 0, '
                     f'got {alpha}, {beta}.')
  if local_steps < 1:
    raise ValueError(f'Per-FedAvg needs local_steps (tau) >= 1, got {local_steps}; set '
                     'hparams.local_steps to the number of local steps per round.')
  if batch_size < 1:
    raise ValueError(f'Per-FedAvg needs batch_size >= 1, got {batch_size}.')
  if variant == 'hf' and not delta > 0:
    raise ValueError(f'Per-FedAvg(HF) needs hf_delta > 0 (the finite-difference step), '
                     f'got {delta}.')
  data_spec = collections.OrderedDict(x=model.x_spec, y=tf.TensorSpec([None], tf.int32))
  return process.build_federated_process(
      initial_params=collections.OrderedDict(weights=model.initial_trainable),
      client_fn=functools.partial(_client_fn, model, variant, alpha, beta, delta, local_steps,
                                  batch_size),
      client_data_spec=data_spec, server_optimizer=server_optimizer, weighting=weighting,
      model_aggregator=model_aggregator)


@dataclasses.dataclass(frozen=True)
class PerFedAvgHparams(hparams.Base, hparams.InnerRate, hparams.EvalSteps, hparams.BatchSize,
                       hparams.LocalSteps, hparams.FedAvgServer):
  """alpha = inner_lr, beta = per_fedavg_beta, tau = local_steps, |D| = batch_size,
  delta = hf_delta; the server step as FedAvg's; `eval_inner_steps` steps (-1 = 1) at evaluation."""
  per_fedavg_beta: float = hparams.field(
      0.001, 'Per-FedAvg beta: local meta step rate (alpha = inner_lr).', hparams.above(0))
  hf_delta: float = hparams.field(
      0.001, 'Per-FedAvg(HF) delta: finite-difference step of the Hessian-vector product; > 0.',
      hparams.above(0))


def round_flops(variant: str, hp: PerFedAvgHparams, cost: flops.ModelCost, num_support: int,
                num_query: int, num_examples: int) -> int:
  """Per local step, with b = min(batch_size, n) examples per batch (`evaluation.flops`):

  - FO: two gradients on b examples, 2 b (F + B_F), and two SGD steps, 4P.
  - HF adds two gradients on D'', 2 b (F + B_F), w +- delta g (4P), their
    difference / 2 delta (2P) and g - alpha d (2P).
  """
  del num_support, num_query
  step, p = cost.train_step, cost.params
  batch = min(hp.batch_size, num_examples)
  local_steps = hp.local_steps if num_examples else 0
  per_step = 2 * batch * step + 4 * p
  if variant == 'hf':
    per_step += 2 * batch * step + 8 * p
  return local_steps * per_step


def _build(model, hp: PerFedAvgHparams, *, variant: str, model_aggregator=None):
  proc = build_per_fedavg_process(
      model, variant=variant, alpha=hp.inner_lr, beta=hp.per_fedavg_beta,
      local_steps=hp.local_steps, batch_size=hp.batch_size, delta=hp.hf_delta,
      server_optimizer=base.fedavg_server_optimizer(hp), weighting=hp.weighting or 'uniform',
      model_aggregator=model_aggregator)
  evaluate = personalized.build_personalized_evaluation(
      model, proc.params_type, personalized.sgd_adapter(model, hp.inner_lr, hp.eval_steps(1)))
  return base.Algorithm(process=proc, evaluate=evaluate, train_data='full')


base.register(*base.variant_entries(_build, PerFedAvgHparams, 'FedEC', (
    ('fo', 'per_fedavg_fo', 'Per-FedAvg(FO)',
     'Per-FedAvg(FO) (Fallah et al. 2020): first-order MAML steps on minibatches'),
    ('hf', 'per_fedavg_hf', 'Per-FedAvg(HF)',
     'Per-FedAvg(HF): Hessian-vector product by finite differences')), round_flops))
