r"""Round overhead: a TFF round against the same math in one plain-TF graph (issue #8).

  python -m benchmarks.round_overhead --model=femnist_cnn --cache_dir=../shared/data/tff
  python -m benchmarks.round_overhead --model=mlp --dataset=digits

For each algorithm the same sampled clients' data are run for --warmup +
--rounds rounds:
- TFF: `process.next` on a project-owned local C++ worker (the state travels
  between Python and the worker every round, as in the programs);
- plain TF: one `tf.compat.v1` graph that calls the *same* pure-TF round
  pieces (`process.client_fn`, `client_update_fn`, `server_update_fn`) with the
  state kept in graph variables; the data are fed each round.
The benchmark asserts that both compute the same round: after round 1 the
norm of the state difference is under 1e-4 of the norm of the change the
round made. It also prints that ratio after all rounds, where float noise can
compound (Adam turns noise in near-zero gradients into +-lr steps), and
prints the median seconds per round after warm-up and their ratio.
"""

import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from tff_meta.algorithms import ALGORITHMS, Hparams  # noqa: E402
from tff_meta.algorithms import process as process_lib  # noqa: E402
from tff_meta.data import load_dataset, protocol  # noqa: E402
from tff_meta.models import build_model_spec  # noqa: E402
from tff_meta.program import client_data, logs  # noqa: E402
from tff_meta.runtime.pool import WorkerPool  # noqa: E402

flags.DEFINE_string('model', 'femnist_cnn', 'Model registry name.')
flags.DEFINE_string('dataset', 'emnist', 'Dataset registry name.')
flags.DEFINE_string('cache_dir', '../shared/data/tff', 'TFF sqlite folder (emnist).')
flags.DEFINE_list('algorithms', ['fedavg', 'fedmeta_maml', 'fedmeta_fomaml', 'fedmeta_metasgd'],
                  'Algorithms to time.')
flags.DEFINE_integer('clients', 4, 'Clients per round.')
flags.DEFINE_integer('examples', 100, 'Examples per client (support 20%, query 80%).')
flags.DEFINE_integer('rounds', 5, 'Timed rounds (median reported).')
flags.DEFINE_integer('warmup', 2, 'Untimed rounds first.')
FLAGS = flags.FLAGS


def _clients():
  options = {'cache_dir': FLAGS.cache_dir, 'max_clients': 40} if FLAGS.dataset == 'emnist' else {}
  ds = load_dataset(FLAGS.dataset, **options)
  big = {k: v for k, v in ds.clients.items() if len(v) >= FLAGS.examples}
  if len(big) < FLAGS.clients:
    sys.exit(f'error: only {len(big)} clients have {FLAGS.examples} examples; lower --examples.')
  chosen = sorted(big)[:FLAGS.clients]
  return ds, [protocol.support_query_split(big[k].take(np.arange(FLAGS.examples)), 0.2, 0, k)
              for k in chosen]


def _plain_tf_round(proc, initial_state, batch):
  """A graph whose `step` op runs one round with the state in variables."""
  graph = tf.Graph()
  with graph.as_default():
    state_vars = tf.nest.map_structure(lambda v: tf.Variable(v), initial_state)
    feeds = [tf.nest.map_structure(lambda a: tf.compat.v1.placeholder(a.dtype, [None, *a.shape[1:]]),
                                   dict(c)) for c in batch]
    state = tf.nest.map_structure(lambda v: v.read_value(), state_vars)
    outs = [process_lib.client_update_fn(proc.client_fn, proc.weighting, state['params'], f)
            for f in feeds]
    total = tf.nest.map_structure(lambda *xs: tf.add_n(list(xs)), *outs)
    new_state = process_lib.server_update_fn(proc.server_optimizer, state, total)
    step = tf.group(*[v.assign(n) for v, n in zip(tf.nest.flatten(state_vars),
                                                    tf.nest.flatten(new_state))])
    init = tf.compat.v1.global_variables_initializer()
  session = tf.compat.v1.Session(graph=graph)
  session.run(init)
  feed = {p: a for f, c in zip(feeds, batch) for p, a in zip(tf.nest.flatten(f),
                                                             tf.nest.flatten(dict(c)))}
  return lambda: session.run(step, feed), lambda: session.run(state_vars), session


def main(argv):
  del argv
  logs.quiet()
  ds, clients = _clients()
  model = build_model_spec(FLAGS.model, ds.element_shape, ds.num_classes, x_dtype=ds.x_dtype)
  hp = Hparams(inner_lr=0.001, server_lr=1e-4, client_lr=1e-4)   # FEMNIST Table 4 rates
  print(f'{FLAGS.model} ({model.num_parameters:,} parameters), {FLAGS.clients} clients x '
        f'{FLAGS.examples} examples, median of {FLAGS.rounds} rounds after {FLAGS.warmup} warm-up')
  print('| Algorithm | TFF s/round | plain TF s/round | ratio | state diff after round 1 | after all rounds |')
  print('|---|---|---|---|---|---|')
  with WorkerPool.local(1) as pool:
    for name in FLAGS.algorithms:
      alg = ALGORITHMS.get(name)(model, hp)
      batch = client_data.round_data(alg.train_data, clients, 0, 1)
      with tff.framework.get_context_stack().install(pool.context):
        state = alg.process.initialize()
        initial = state
        tff_times = []
        for r in range(FLAGS.warmup + FLAGS.rounds):
          t0 = time.perf_counter()
          state, _ = alg.process.next(state, batch)
          tff_times.append(time.perf_counter() - t0)
          if r == 0:
            tff_first = state
      step, read, session = _plain_tf_round(alg.process, initial, batch)
      ref_times = []
      for r in range(FLAGS.warmup + FLAGS.rounds):
        t0 = time.perf_counter()
        step()
        ref_times.append(time.perf_counter() - t0)
        if r == 0:
          ref_first = read()
      ref_state = read()
      session.close()
      flat = lambda s: np.concatenate([np.ravel(x) for x in tf.nest.flatten(s['params'])])
      rel = lambda a, b: float(np.linalg.norm(flat(a) - flat(b)) /
                               max(np.linalg.norm(flat(b) - flat(initial)), 1e-12))
      first = rel(tff_first, ref_first)
      assert first < 1e-4, f'{name}: round 1 differs between TFF and plain TF (relative {first:.2e})'
      diff = rel(state, ref_state)   # after all rounds: float noise may compound (Adam)
      t_tff = statistics.median(tff_times[FLAGS.warmup:])
      t_ref = statistics.median(ref_times[FLAGS.warmup:])
      print(f'| {alg.display_name} | {t_tff:.3f} | {t_ref:.3f} | {t_tff / t_ref:.2f} | {first:.1e} '
            f'| {diff:.1e} |', flush=True)


if __name__ == '__main__':
  app.run(main)
