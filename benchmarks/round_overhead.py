r"""Round overhead: a TFF round against the same math in one plain-TF graph.

  python -m benchmarks.round_overhead --model=femnist_cnn --dataset=emnist --cache_dir=<tff data folder>
  python -m benchmarks.round_overhead --modes=default --csv=overhead.csv   # rows also to a CSV
  python -m benchmarks.round_overhead --model=mlp --dataset=digits --examples=16
  python -m benchmarks.round_overhead --model=shakespeare_lstm --dataset=shakespeare --cache_dir=<tff data folder>

For each algorithm and each --modes entry, the same real clients' data are
run for every round:
- TFF, on a project-owned local C++ worker:
  - `default`: what `programs.train` runs with no flag, the runner the
    training loop's own `ExecutionPlan` builds from the config defaults
    (today the resident path below);
  - `plain`: `PlainRounds`, one `process.next` per round (the state travels
    between Python and the worker every round);
  - `resident`: `ResidentRounds` (`tff_meta/runtime/resident.py`): one
    `process.next` per round, the state stays on the worker and is fetched
    only after the first and the last call;
- plain TF: one `tf.compat.v1` graph that calls the *same* pure-TF round
  pieces (`process.client_work`, `server_update_fn`), state
  in graph variables, data fed each round (`benchmarks/common.py`).

The benchmark asserts that both compute the same state: after the first call
(k rounds; 1 for `default` and `resident`) the norm of the state difference
is under 1e-4 of the norm of the change those rounds made.

Timing: --warmup untimed calls, then --calls timed calls; TFF and plain TF
alternate call by call (k TFF rounds, then k plain-TF rounds), so other load
on the machine hits both alike. Per round: wall seconds (median [min-max])
and CPU seconds (this process plus the TFF worker), and the ratio of medians.
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

import os  # noqa: E402

from absl import app, flags  # noqa: E402

from benchmarks import common  # noqa: E402
from tff_meta.data import client_data  # noqa: E402
from tff_meta.core import logs
from tff_meta.runtime.pool import WorkerPool  # noqa: E402

common.define_setup_flags(model='femnist_cnn', clients=4)
flags.DEFINE_list('algorithms', ['fedavg', 'fedmeta_maml', 'fedmeta_fomaml', 'fedmeta_metasgd'],
                  'Algorithms to time (overrides --algorithm).')
flags.DEFINE_list('modes', ['default', 'plain'],
                  'Settings to time: default = the path programs.train takes with no flag '
                  '(runtime/execution_plan.py); plain = one process.next per round; resident = the '
                  'state stays on the worker (one round per call).')
flags.DEFINE_integer('calls', 5, 'Timed calls per setting (median, min, max reported).')
flags.DEFINE_integer('warmup', 1, 'Untimed calls first (the first one is checked).')
flags.DEFINE_string('csv', '', 'Also write the rows to this CSV file (written after each row).')
FLAGS = flags.FLAGS

def main(argv):
  del argv
  logs.quiet()
  ds, clients, model = common.load_setup(FLAGS, FLAGS.clients)
  print(f'{FLAGS.model} ({model.num_parameters:,} parameters) on {FLAGS.dataset}, {FLAGS.clients} '
        f'clients x {FLAGS.examples} examples; per round: median [min-max] of {FLAGS.calls} calls '
        f'after {FLAGS.warmup} warm-up; {common.machine()}')
  # the last column of each row: the load average when it was measured
  header = ['algorithm', 'mode', *common.TIMING_HEADER, 'state diff', 'load average']
  common.table(header)
  rows = []
  with WorkerPool.local(1) as pool:
    for name in FLAGS.algorithms:
      alg = common.build_algorithm(name, model)
      batch = client_data.round_data(alg.train_data, clients, 0, 1)
      for mode in FLAGS.modes:
        t, check = common.time_setting(alg, batch, mode, pool, FLAGS.calls, FLAGS.warmup)
        row = [alg.display_name, mode, *common.timing_cells(t), f'{check:.1e}',
               f'{os.getloadavg()[0]:.1f}']
        print('| ' + ' | '.join(row) + ' |', flush=True)
        rows.append(row)
        if FLAGS.csv:
          common.write_csv(FLAGS.csv, header, rows)


if __name__ == '__main__':
  app.run(main)
