r"""Memory over many rounds: peak RSS and RSS growth of Python and the TFF worker.

  python -m benchmarks.memory --cache_dir=<tff data folder>
  python -m benchmarks.memory --model=femnist_cnn --rounds=300 --resident_state

Runs --rounds rounds of one algorithm on clients sampled per round from a
pool of real clients (as the training loop does, so client data sizes vary
from round to round), through `PlainRounds` (or
`ResidentRounds` with --resident_state). Samples
the resident set (VmRSS) of this process and of the worker after --warmup
rounds and every --every rounds, and prints, per process: RSS after warm-up,
RSS at the end, growth in % of the post-warm-up RSS, the largest RSS sampled
after warm-up, and the peak (VmHWM). TFF issues report per-round leaks;
the growth must stay bounded (target: < 5% over 300 rounds).
"""

import os

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import app, flags  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from benchmarks import common, processes  # noqa: E402
from tff_meta.core import logs  # noqa: E402
from tff_meta.classification.training_loop import RoundSampler  # noqa: E402
from tff_meta.runtime.pool import WorkerPool  # noqa: E402
from tff_meta.runtime.resident import ResidentRounds  # noqa: E402
from tff_meta.runtime.rounds import PlainRounds  # noqa: E402

common.define_setup_flags(model='mlp', clients=4)
flags.DEFINE_integer('pool_clients', 40, 'Real clients to sample from.')
flags.DEFINE_integer('rounds', 300, 'Rounds after warm-up.')
flags.DEFINE_integer('warmup', 10, 'Rounds before the baseline sample.')
flags.DEFINE_integer('every', 50, 'Sample RSS every N rounds.')
flags.DEFINE_bool('resident_state', False, 'Keep the state on the worker (runtime/resident.py).')
FLAGS = flags.FLAGS


def main(argv):
  del argv
  logs.quiet()
  ds, clients, model = common.load_setup(FLAGS, FLAGS.pool_clients)
  alg = common.build_algorithm(FLAGS.algorithm, model)
  env = common.worker_env(FLAGS.worker_env)
  total = FLAGS.warmup + FLAGS.rounds

  sampler = RoundSampler(alg.train_data, clients, FLAGS.clients, seed=0)
  round_batch = lambda r: sampler.sample(r).batch

  print(f'{alg.display_name}, {FLAGS.model} ({model.num_parameters:,} parameters), '
        f'{FLAGS.clients} of {len(clients)} clients per round, '
        f'resident_state={FLAGS.resident_state}, worker env {env}, '
        f'{FLAGS.rounds} rounds after {FLAGS.warmup} warm-up; {common.machine()}')
  with WorkerPool.local(1, env=env) as pool:
    pids = {'python': os.getpid(), 'worker': common.worker_pids(pool)[0]}
    sampled = lambda r: r == total or (r >= FLAGS.warmup and (r - FLAGS.warmup) % FLAGS.every == 0)
    if FLAGS.resident_state:
      runner = ResidentRounds(alg.process, pool.addresses[0], FLAGS.clients, sampled)
    else:
      runner = PlainRounds(alg.process)
    samples = {name: {} for name in pids}
    with tff.framework.get_context_stack().install(pool.context), common.Clock() as clock:
      state = alg.process.initialize()
      for r in range(1, total + 1):
        state = runner.next(state, r, round_batch(r)).state
        if sampled(r):
          for name, pid in pids.items():
            samples[name][r] = processes.rss_mb(pid)
    peaks = {name: processes.peak_rss_mb(pid) for name, pid in pids.items()}
    runner.close()
  print(f'{total} rounds in {clock.wall:.0f} s; RSS in MB at rounds '
        f'{", ".join(str(r) for r in samples["python"])}')
  common.table(['process', 'RSS after warm-up', f'RSS after {FLAGS.rounds} more rounds',
                'growth', 'max sampled', 'peak (VmHWM)', 'samples'])
  for name, rss in samples.items():
    first, last = rss[FLAGS.warmup], rss[total]
    print(f'| {name} | {first:.0f} | {last:.0f} | {100 * (last - first) / first:+.1f}% | '
          f'{max(rss.values()):.0f} | {peaks[name]:.0f} | '
          f'{" ".join(f"{v:.0f}" for v in rss.values())} |')


if __name__ == '__main__':
  app.run(main)
