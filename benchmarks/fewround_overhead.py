r"""FRL episode overhead: a TFF meta-training episode against the same math in plain TF.

  python -m benchmarks.fewround_overhead --config=configs/fewround/femnist62_5way_iid_frl.toml \
      --data_path=<tff data folder>

One FRL meta-training episode (Park et al. Algorithm 1: R rounds of K
clients, then the first-order meta-update) on the config's own seeded
meta-train episodes, three ways:

- `calls`: `process.run_episode`, what `programs.train` runs: 1 + R + 1
  federated computations per episode (start, R rounds, meta-update), each
  with a single aggregation, as worker pools need;
- `chained`: `process.next`, the same pieces chained into one federated
  computation (the state and the clients' data cross to the worker once per
  episode instead of R + 2 times);
- plain TF: one `tf.compat.v1` graph that calls the *same* pure-TF pieces
  (`round_client_fn`, `round_server_fn`, `meta_client_fn`, `meta_server_fn`)
  for the K clients in turn (a `tf.while_loop`), data fed per episode.

After the first episode the norm of each mode's phi minus another's,
relative to the norm of the step phi_1 - phi_0, is printed; `calls` and
`chained` must agree to 1e-6 (they run the same TF functions on the same
worker). Plain TF runs the same math with other kernels and reduction
orders, and how far it ends from TFF after an episode depends on the local
dynamics: at the FRL config's alpha = 0.003, E = 5 (GPAL on) the float-level
differences grow to 0.84 of the step's norm, and with `--local_steps=1` to
0.007 (docs/RESULTS.md). The timings compare the same work either way.

Timing: --warmup untimed episodes (tracing, the worker's graph caches), then
--episodes timed ones per mode, the modes alternating episode by episode so
other load hits all alike. Wall and CPU seconds per episode (this process
plus the TFF worker). Nothing here asserts speed.
"""

import os

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import app, flags  # noqa: E402

from benchmarks import common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string('config', 'configs/fewround/femnist62_5way_iid_frl.toml', 'Few-round config.')
flags.DEFINE_string('data_path', os.path.expanduser('~/.tff'), 'The data folder (as programs.train).')
flags.DEFINE_string('method', 'frl_distance_gpal', 'frl_distance_gpal or frl_distance.')
flags.DEFINE_integer('episodes', 10, 'Timed episodes per mode.')
flags.DEFINE_integer('warmup', 2, 'Untimed episodes per mode first.')
flags.DEFINE_float('inner_lr', None, 'alpha (default: the config\'s).')
flags.DEFINE_integer('local_steps', None, 'E (default: the config\'s).')


def _plain_episode(process_lib, meta_lib, model, hp, optimizer, spec, num_clients):
  """A plain-TF graph of one episode: run(state, clients) -> new state.

  The K clients (equal-sized here) are stacked and visited by a `tf.while_loop`
  that sums their outputs, so the graph holds one client's computation, not K.
  """
  import collections  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  graph = tf.Graph()
  with graph.as_default():
    ph = lambda s, lead=(): tf.compat.v1.placeholder(s.dtype, [*lead, *s.shape])
    phi = [ph(s) for s in model.weight_specs]
    opt_state = tf.nest.map_structure(
        lambda t: tf.compat.v1.placeholder(t.dtype, t.shape),
        tf.nest.map_structure(tf.convert_to_tensor, optimizer.initialize(model.weight_specs)))
    episode = tf.compat.v1.placeholder(tf.int32, [])
    stacked = collections.OrderedDict((k, ph(s, (num_clients,))) for k, s in spec.items())
    client = lambda i: collections.OrderedDict((k, v[i]) for k, v in stacked.items())

    def summed(fn):   # sum over clients of fn(client data)
      first = fn(client(0))
      body = lambda i, acc: (i + 1, tf.nest.map_structure(tf.add, acc, fn(client(i))))
      return tf.while_loop(lambda i, _: i < num_clients, body, (tf.constant(1), first),
                           parallel_iterations=1)[1]

    state = collections.OrderedDict(phi=phi, optimizer_state=opt_state, episode=episode)
    server = process_lib.fresh_round_state(model, phi, hp.zero_head)
    for _ in range(hp.rounds):
      total = summed(lambda d, server=server: process_lib.round_client_fn(model, hp, server, d))
      server = process_lib.round_server_fn(server, total)
    broadcast = collections.OrderedDict(phi=phi, optimizer_state=opt_state,
                                        meta_lr=meta_lib.meta_lr(hp, episode), round=server)
    total = summed(lambda d: process_lib.meta_client_fn(model, hp, optimizer, broadcast, d))
    out = process_lib.meta_server_fn(hp, optimizer, state, total)
    session = tf.compat.v1.Session(graph=graph)

  def run(s, data):
    import numpy as np  # pylint: disable=g-import-not-at-top
    feed = {episode: s['episode']}
    feed.update(zip(phi, s['phi']))
    feed.update(zip(tf.nest.flatten(opt_state), tf.nest.flatten(s['optimizer_state'])))
    feed.update({v: np.stack([d[k] for d in data]) for k, v in stacked.items()})
    return session.run(out, feed)

  return run


def main(argv):
  del argv
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_meta.algorithms.base import OPTIMIZERS  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround import baselines, tasks  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround import meta_update as meta_lib  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround import process as process_lib  # pylint: disable=g-import-not-at-top
  from tff_meta.runtime.pool import WorkerPool  # pylint: disable=g-import-not-at-top

  cfg = config_lib.load(FLAGS.config)
  cfg = config_lib.with_data_path(cfg, FLAGS.data_path, tasks.path_option(cfg.dataset))
  data = tasks.load_class_split(cfg.dataset, cfg.class_split, cfg.seed, **cfg.data)
  ctx = baselines.Context(cfg, data)
  gamma = cfg.gamma if FLAGS.method == 'frl_distance_gpal' else 0.0
  overrides = {'inner_lr': FLAGS.inner_lr, 'local_steps': FLAGS.local_steps}
  hp = cfg.hparams(gamma=gamma, **{k: v for k, v in overrides.items() if v is not None})
  model = ctx.model('distance')
  optimizer = OPTIMIZERS.get(hp.server_optimizer)(hp.server_lr)
  total = FLAGS.warmup + FLAGS.episodes
  episodes = [ctx.episode('train', baselines.TRAIN_STREAM, e) for e in range(total)]
  print(f'{FLAGS.method}, {FLAGS.config}: R = {hp.rounds}, E = {hp.local_steps}, '
        f'K = {cfg.num_clients} clients, {cfg.ways}-way, '
        f'{len(episodes[0][0]["support_y"])} support + {len(episodes[0][0]["query_y"])} query '
        f'images per client; {FLAGS.episodes} timed episodes per mode after {FLAGS.warmup} '
        f'warm-up; {common.machine()}', flush=True)
  plain = _plain_episode(process_lib, meta_lib, model, hp, optimizer, ctx.spec, cfg.num_clients)
  with WorkerPool.local(1) as pool, tff.framework.get_context_stack().install(pool.context):
    proc = process_lib.build_meta_training(model, hp, ctx.spec)
    initial = proc.initialize()
    modes = {
        'calls': lambda s, d: process_lib.run_episode(proc, s, d)[0],
        'chained': lambda s, d: proc.next(s, d)[0],
        'plain TF': plain,
    }
    states = {m: initial for m in modes}
    times = {m: {'wall': [], 'cpu': []} for m in modes}
    pids = common.worker_pids(pool)
    for e in range(total):
      for mode, step in modes.items():
        with common.Clock(pids if mode != 'plain TF' else ()) as clock:
          states[mode] = step(states[mode], episodes[e])
        if e >= FLAGS.warmup:
          times[mode]['wall'].append(clock.wall)
          times[mode]['cpu'].append(clock.cpu)
      if e == 0:
        flat = lambda ws: np.concatenate([np.ravel(np.asarray(w)) for w in ws])
        ref = flat(states['plain TF']['phi'])
        moved = float(np.linalg.norm(ref - flat(initial['phi'])))
        diffs = {m: float(np.linalg.norm(flat(states[m]['phi']) - ref))
                 for m in ('calls', 'chained')}
        diffs['calls vs chained'] = float(np.linalg.norm(
            flat(states['calls']['phi']) - flat(states['chained']['phi'])))
        for mode, diff in diffs.items():
          print(f'{mode}: |difference| / |phi_1 - phi_0| after one episode = '
                f'{diff / moved:.1e}', flush=True)
        if diffs['calls vs chained'] > 1e-6 * moved:
          raise SystemExit('error: calls and chained disagree after one episode '
                           f'({diffs["calls vs chained"]:.2e} against a step of {moved:.2e}).')
  med = lambda m, what: common.summary(times[m][what])['median']
  common.table(['mode', 's/episode (median [min-max])', 'CPU s/episode', 'ratio to plain TF',
                'CPU ratio'])
  for mode in modes:
    print(f'| {mode} | {common.fmt(times[mode]["wall"])} | {med(mode, "cpu"):.3f} | '
          f'{med(mode, "wall") / med("plain TF", "wall"):.2f} | '
          f'{med(mode, "cpu") / med("plain TF", "cpu"):.2f} |', flush=True)


if __name__ == '__main__':
  app.run(main)
