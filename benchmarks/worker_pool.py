r"""Worker pools: 2 loopback workers against 1 on a compute-bound round.

  python -m benchmarks.worker_pool --cache_dir=<tff data folder>
  python -m benchmarks.worker_pool --model=mlp --clients=32
  python -m benchmarks.worker_pool --clients=32 --resident_state

With --resident_state both pools keep the server state on their first
worker and split the clients over the workers (`runtime/pool_resident.py`);
without it they use TFF's mergeable context, which moves the state through
Python to every worker every round.

Both pools run the same process on the same 32 real clients' data; one
worker runs them all, two split them (TFF's mergeable context, see
`tff_meta/runtime/pool.py`). Calls alternate between the pools so other load
hits both alike. Prints s/round (median [min-max]) per pool, the speed-up
(median 1 worker / median 2 workers), and the physical limit of this machine:
two workers cannot use more cores than there are, so the limit is
min(2, cores / cores that 1 worker already keeps busy), where the latter is
the worker's CPU seconds per wall second during its rounds (TensorFlow runs
one worker's ops on several threads). Also checks that both pools give the
same state after round 1.
"""

import os

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import app, flags  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from benchmarks import common  # noqa: E402
from tff_meta.core import logs
from tff_meta.runtime.pool import WorkerPool  # noqa: E402
from tff_meta.runtime.pool_resident import PoolResidentRounds  # noqa: E402

common.define_setup_flags(model='femnist_cnn', clients=32)
flags.DEFINE_integer('rounds', 5, 'Timed rounds per pool.')
flags.DEFINE_integer('warmup', 1, 'Untimed rounds first.')
flags.DEFINE_bool('resident_state', False, 'Keep the state on worker 0 and split the clients '
                  '(runtime/pool_resident.py) instead of TFF\'s mergeable context.')
FLAGS = flags.FLAGS

def main(argv):
  del argv
  logs.quiet()
  _, model, alg, batch = common.load_round(FLAGS)
  env = common.worker_env(FLAGS.worker_env)
  print(f'{alg.display_name}, {FLAGS.model} ({model.num_parameters:,} parameters), {FLAGS.clients} '
        f'clients x {FLAGS.examples} examples; median [min-max] of {FLAGS.rounds} rounds after '
        f'{FLAGS.warmup} warm-up; worker env {env}; '
        f'{"state resident on worker 0" if FLAGS.resident_state else "mergeable context"}; '
        f'{common.machine()}')
  with WorkerPool.local(1, env=env) as one, WorkerPool.local(2, env=env) as two:
    pools = {1: one, 2: two}
    clocks = {n: common.Clock(common.worker_pids(p)) for n, p in pools.items()}
    with tff.framework.get_context_stack().install(one.context):
      initial = alg.process.initialize()
    states = {n: initial for n in pools}
    wall = {n: [] for n in pools}
    busy = []   # cores kept busy by the single worker
    rounds_of = {}
    if FLAGS.resident_state:   # state fetched after round 1 (the check) and at the end
      last = FLAGS.warmup + FLAGS.rounds
      rounds_of = {n: PoolResidentRounds(alg.process, p.addresses, len(batch),
                                         needs_state=lambda r: r in (1, last))
                   for n, p in pools.items()}
    for r in range(FLAGS.warmup + FLAGS.rounds):
      for n, pool in pools.items():
        worker_clock = common.Clock(common.worker_pids(pool), include_self=False)
        with tff.framework.get_context_stack().install(pool.context), clocks[n], worker_clock:
          if rounds_of:
            states[n] = rounds_of[n].next(states[n], r + 1, batch).state
          else:
            states[n], _ = alg.process.next(states[n], batch)
        if r < FLAGS.warmup:
          continue
        wall[n].append(clocks[n].wall)
        if n == 1:
          busy.append(worker_clock.cpu / worker_clock.wall)
      if r == 0:
        diff = common.relative_difference(states[2], states[1], initial)
        assert diff < common.TOLERANCE, f'2 workers differ from 1 after round 1 (relative {diff:.2e})'
    for rounds in rounds_of.values():
      rounds.close()
  med = {n: common.summary(w)['median'] for n, w in wall.items()}
  cores = os.cpu_count()
  used = common.summary(busy)['median']
  common.table(['workers', 's/round', 'speed-up', 'physical limit', 'state diff after round 1'])
  print(f'| 1 | {common.fmt(wall[1])} | 1.00 | | |')
  print(f'| 2 | {common.fmt(wall[2])} | {med[1] / med[2]:.2f} | '
        f'{min(2.0, cores / used):.2f} ({cores} cores; 1 worker keeps {used:.2f} busy) | '
        f'{diff:.1e} |')


if __name__ == '__main__':
  app.run(main)
