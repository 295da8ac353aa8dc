"""Small real data and plain-TF references shared by the tests."""

import collections
import contextlib
import os
import signal
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tff_meta.data import load_dataset, protocol
from tff_meta.models import build_model_spec


def digits_protocol(support_fraction=0.3, seed=0, num_clients=50):
  ds = load_dataset('digits', num_clients=num_clients, labels_per_client=2, seed=seed)
  return protocol.prepare(ds, support_fraction=support_fraction, seed=seed)


def mlp_spec(hidden=16, seed=0):
  return build_model_spec('mlp', (8, 8), 10, seed=seed, hidden_units=(hidden,))


def episode(client):
  return collections.OrderedDict(
      support_x=client.support.x, support_y=client.support.y,
      query_x=client.query.x, query_y=client.query.y)


def mlp_logits(weights, x):
  """Plain-TF forward of the test MLP (independent of Keras and TFF)."""
  w1, b1, w2, b2 = weights
  h = tf.nn.relu(tf.matmul(tf.reshape(x, [tf.shape(x)[0], -1]), w1) + b1)
  return tf.matmul(h, w2) + b2


def ce(logits, y):
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def reference_meta_gradient(weights, ep, alpha, steps=1, first_order=False, rates=None):
  """Plain eager TF MAML / Meta-SGD meta-gradient with nested tapes.

  Returns (grad wrt weights, grad wrt rates or None).
  """
  theta = [tf.Variable(w, dtype=tf.float32) for w in weights]
  alphas = [tf.Variable(r, dtype=tf.float32) for r in rates] if rates is not None else None
  with tf.GradientTape(persistent=True) as outer:
    current = [tf.identity(t) for t in theta]
    for _ in range(steps):
      with tf.GradientTape() as inner:
        inner.watch(current)
        loss = ce(mlp_logits(current, ep['support_x']), ep['support_y'])
      g = inner.gradient(loss, current)
      if first_order:
        g = [tf.stop_gradient(x) for x in g]
      if alphas is None:
        current = [c - alpha * gi for c, gi in zip(current, g)]
      else:
        current = [c - a * gi for c, a, gi in zip(current, alphas, g)]
    q = ce(mlp_logits(current, ep['query_x']), ep['query_y'])
  gw = [x.numpy() for x in outer.gradient(q, theta)]
  ga = [x.numpy() for x in outer.gradient(q, alphas)] if alphas is not None else None
  return gw, ga


def assert_rel_close(actual, expected, rtol=1e-5, atol=1e-7):
  for a, e in zip(actual, expected):
    a, e = np.asarray(a), np.asarray(e)
    err = np.max(np.abs(a - e)) / max(np.max(np.abs(e)), atol)
    assert err <= rtol, f'relative error {err:.2e} > {rtol}'


def cyclic_batch(x, y, batch_size, index):
  """NumPy reference of `learning.minibatch_stream`: batch `index` of the cyclic stream."""
  n = len(y)
  b = max(min(batch_size, n), 1)
  rows = (index * b + np.arange(b)) % n
  return x[rows], y[rows]


def loss_grad(weights, x, y):
  """Plain eager TF gradient of the test MLP's mean cross-entropy."""
  weights = [tf.convert_to_tensor(w) for w in weights]
  with tf.GradientTape() as tape:
    tape.watch(weights)
    loss = ce(mlp_logits(weights, x), y)
  return tape.gradient(loss, weights)


def perturbed(weights, seed, scale=0.1, offset=True):
  """`weights` plus seeded Gaussian noise (or, with offset=False, the noise alone)."""
  rng = np.random.default_rng(seed)
  noise = [scale * rng.standard_normal(np.shape(w)).astype(np.float32) for w in weights]
  return [np.asarray(w, np.float32) + n for w, n in zip(weights, noise)] if offset else noise


def reference_minibatch_sgd(weights, x, y, lr, epochs, batch_size, grad_fn=loss_grad):
  """Plain-TF reference of `local_training.train_minibatches` with SGD.

  Minibatches in order, the last one partial, `epochs` passes;
  `grad_fn(weights, batch_x, batch_y)` gives the gradients of one step.
  """
  weights = [tf.convert_to_tensor(w, tf.float32) for w in weights]
  for _ in range(epochs):
    for start in range(0, len(y), batch_size):
      grads = grad_fn(weights, x[start:start + batch_size], y[start:start + batch_size])
      weights = [w - lr * g for w, g in zip(weights, grads)]
  return [w.numpy() for w in weights]


def assert_query_loss(result, weights, client, rtol=1e-5):
  """An evaluation result's `loss_sum` is the plain-TF query loss of the MLP `weights`."""
  expected = ce(mlp_logits(weights, client.query.x), client.query.y).numpy()
  np.testing.assert_allclose(result['loss_sum'], expected * len(client.query.y), rtol=rtol)


def check_states_follow_clients(proc, client_datas):
  """Two rounds of a stateful process; each client gets back its own state, in order.

  Round 1 starts every client from `initial_client_state`; round 2 passes the
  states and data in reverse order. Each returned state must equal what
  `proc.client_update` gives that client alone, so no state is mixed up or
  shared. Returns the round-1 states (the caller checks they differ).
  """
  state = proc.initialize()
  rounds = [([proc.initial_client_state] * len(client_datas), list(client_datas))]
  for round_num in range(2):
    states, datas = rounds[-1]
    params = state['params']
    state, new_states, _ = proc.next(state, states, datas)
    for old, data, got in zip(states, datas, new_states):
      _, alone = proc.client_update(params, old, data)
      assert got['visits'] == old['visits'] + 1.0
      for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(alone)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if round_num == 0:
      first = new_states
      rounds.append((new_states[::-1], datas[::-1]))
  return first


def stateful_setup(name, hparams):
  """(model, data, algorithm) for testing the stateful algorithm `name` on the digits MLP."""
  from tff_meta.algorithms import ALGORITHMS  # pylint: disable=g-import-not-at-top
  data = digits_protocol()
  model = mlp_spec()
  return model, data, ALGORITHMS.get(name)(model, hparams)


def full_data_clients(data, count=2):
  """The first `count` training clients' full data, as a stateful round takes them."""
  return [collections.OrderedDict(x=data.train[i].all.x, y=data.train[i].all.y)
          for i in range(count)]


def client_update_from_perturbed(setup, personal):
  """`client_update` of a `stateful_setup` algorithm on training client 0's full data.

  The params are <weights=w> and the client state `with_visits(personal(v))`,
  with w and v the initial weights perturbed with seeds 0 and 1. Returns
  (client, w, v, contribution, new_state).
  """
  from tff_meta.algorithms import stateful  # pylint: disable=g-import-not-at-top
  model, data, alg = setup
  client = data.train[0].all
  w = perturbed(model.initial_trainable, 0)
  v = perturbed(model.initial_trainable, 1)
  out, new_state = alg.process.client_update(
      collections.OrderedDict(weights=w), stateful.with_visits(personal(v)),
      collections.OrderedDict(x=client.x, y=client.y))
  return client, w, v, out, new_state


def evaluate_known_and_new(setup, personal, visits):
  """`evaluate` of a `stateful_setup` algorithm on a known client and a new one.

  The params are <weights=w>; the known client (training client 0) keeps the
  state `with_visits(personal(v))` with `visits` (> 0: it took part in
  training); the new one (test client 0) has `initial_client_state`, which is
  also the one candidate. w and v are the initial weights perturbed with
  seeds 2 and 3. Returns (known, new, w, v, per-client results).
  """
  from tff_meta.algorithms import stateful  # pylint: disable=g-import-not-at-top
  model, data, alg = setup
  known, new = data.train[0], data.test[0]
  w = perturbed(model.initial_trainable, 2)
  v = perturbed(model.initial_trainable, 3)
  states = [stateful.with_visits(personal(v)), alg.process.initial_client_state]
  states[0]['visits'] = np.float32(visits)
  candidates = stateful.stack_states([], 1, alg.process.initial_client_state)
  out = alg.evaluate(collections.OrderedDict(weights=w), candidates, states,
                     [episode(known), episode(new)])
  return known, new, w, v, out


def assert_bad_hparams(name, model, change, match):
  """Building algorithm `name` with `Hparams(**change)` raises a ValueError matching `match`."""
  import pytest  # pylint: disable=g-import-not-at-top
  from tff_meta.algorithms import ALGORITHMS, Hparams  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=match):
    ALGORITHMS.get(name)(model, Hparams(**change))


def program_env():
  """The environment for running a program binary in a test subprocess."""
  import os  # pylint: disable=g-import-not-at-top
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1')


def parent_pid(pid):
  try:
    with open(f'/proc/{pid}/stat') as f:
      return int(f.read().rsplit(')', 1)[1].split()[1])
  except (FileNotFoundError, IndexError):
    return -1


def workers_of(pid):
  """PIDs of the TFF worker binaries whose parent is `pid`."""
  import subprocess  # pylint: disable=g-import-not-at-top
  out = subprocess.run(['pgrep', '-f', 'worker_binary'], capture_output=True, text=True).stdout
  return [int(p) for p in out.split() if parent_pid(int(p)) == pid]


def csv_rounds(path):
  """The `round` column of a metrics/eval CSV."""
  import csv  # pylint: disable=g-import-not-at-top
  with open(path, newline='') as f:
    return [int(r['round']) for r in csv.DictReader(f)]


def alive(pid):
  """Whether process `pid` exists and is not a zombie."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except (FileNotFoundError, ProcessLookupError):
    return False


def kill_run_at_checkpoint(cmd, out, round_num, worker_exit_s, timeout=240):
  """Starts the program run `cmd` (output dir `out`) and SIGKILLs it at a checkpoint.

  Waits for the checkpoint of round `round_num`, kills the run, then waits up
  to `worker_exit_s` seconds for its TFF workers to exit (on the parent's
  death, PDEATHSIG). Returns those workers' PIDs.
  """
  import signal  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  from tests.conftest import REPO  # pylint: disable=g-import-not-at-top
  proc = subprocess.Popen(cmd, cwd=REPO, env=program_env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  deadline = time.time() + timeout
  while not (out / 'checkpoints' / f'program_state_{round_num}').exists():
    assert proc.poll() is None, 'run ended before it could be killed'
    assert time.time() < deadline, f'no checkpoint for round {round_num} appeared'
    time.sleep(0.02)
  workers = workers_of(proc.pid)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  deadline = time.time() + worker_exit_s
  while any(alive(p) for p in workers):
    assert time.time() < deadline, 'the killed run\'s worker survived'
    time.sleep(0.1)
  return workers


def fedmeta_rounds(variant: str, clients_per_round: int):
  """A FedMeta process on digits (MLP, server Adam) and its seeded round batches.

  Returns (process, round_batch(r) -> the episodes of round r's sampled clients).
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_meta.algorithms import fedmeta  # pylint: disable=g-import-not-at-top
  from tff_meta.data import client_data  # pylint: disable=g-import-not-at-top
  data, model = digits_protocol(), mlp_spec()
  proc = fedmeta.build_fedmeta_process(
      model, variant=variant, inner_lr=0.1, inner_steps=1,
      server_optimizer=tff.learning.optimizers.build_adam(learning_rate=0.01))

  def round_batch(r):
    idx = client_data.sample_clients(len(data.train), clients_per_round, 0, r)
    return client_data.round_data('episode', [data.train[i] for i in idx], 0, r)
  return proc, round_batch



_HOLD_FOLDER = """
import sys, time
from tff_meta.core import files
files.claim_folder(sys.argv[1])
print('held', flush=True)
time.sleep(300)
"""


@contextlib.contextmanager
def folder_held_by_another_run(folder):
  """Within the block, another process holds `folder` as a run folder (`files.claim_folder`, as a
  running program does); yields that process's PID. It is killed at the end, and so its lock
  dropped."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  holder = subprocess.Popen([sys.executable, '-c', _HOLD_FOLDER, str(folder)], cwd=repo,
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline() == 'held\n'
    yield holder.pid
  finally:
    holder.kill()
    holder.wait()
    holder.stdout.close()


def sigterm_after_first_line(script, cwd=None):
  """Runs `python -c script`, sends it SIGTERM once it has printed its first stdout line, and
  returns (that line, its exit code, its stderr)."""
  program = subprocess.Popen([sys.executable, '-c', script], cwd=cwd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  first = program.stdout.readline()
  program.send_signal(signal.SIGTERM)
  try:
    _, err = program.communicate(timeout=60)
  finally:
    program.kill()
  return first, program.returncode, err
