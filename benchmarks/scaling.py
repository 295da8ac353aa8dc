r"""Scaling of the TFF round against plain TF with clients per round and model size.

  python -m benchmarks.scaling --cache_dir=<folder of TFF's emnist_all.sqlite>
  python -m benchmarks.scaling --models=femnist_cnn --clients_list=4,16,64 --modes=1,resident
  python -m benchmarks.scaling --models=mlp --clients_list=64,256 --modes=resident,grouped \
      --csv=scaling.csv

For each model (on the same EMNIST clients: logistic regression 50K, MLP,
FEMNIST CNN 6.6M parameters) and each number of clients per round (up to
256; fewer real clients are reused cyclically), times one algorithm's TFF
round against the same math in one plain-TF graph, with `common.time_setting`
(calls alternate between the two; the first TFF call is checked against
plain TF). Modes: `default` (what `programs.train` runs: grouped where
`execution_plan` groups), `resident` (one client per call) and `grouped`
(all of the round's clients in one call, `runtime/grouped.py`). Prints
s/round (median [min-max]), the ratio of medians, the CPU ratio and the
load average when the row was measured (the machine may be shared);
`--csv` also writes the rows to a file.

On a shared machine, start it in a session of its own at the niceness you
want, e.g. `setsid sh -c 'echo 10 > /proc/self/autogroup; exec nice -n 10
python -m benchmarks.scaling ...'`. The TFF worker runs in an autogroup of
its own at the program's niceness (`tff_meta/runtime/priority.py`); a plain
`nice` leaves this process, which runs the plain-TF side, in the shell's
autogroup at nice 0, and under load the worker then gets a far smaller share
of the CPU than the plain-TF side (a FEMNIST CNN round measured 11.6x plain
TF in wall time at 1.22x its CPU time).
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

import os  # noqa: E402

from absl import app, flags  # noqa: E402

from benchmarks import common  # noqa: E402
from tff_meta.models import build_model_spec  # noqa: E402
from tff_meta.data import client_data  # noqa: E402
from tff_meta.core import logs
from tff_meta.runtime.pool import WorkerPool  # noqa: E402

common.define_setup_flags(model='femnist_cnn', clients=4)
flags.DEFINE_list('models', ['logistic_regression', 'mlp', 'femnist_cnn'], 'Models to time.')
flags.DEFINE_list('clients_list', ['4', '16', '64', '256'], 'Clients per round.')
flags.DEFINE_list('modes', ['default', 'plain'],
                  'Settings to time (see round_overhead): default = programs.train\'s path; '
                  'plain; resident (one client per call); grouped = all of a worker\'s '
                  'clients in one call, groupedK = at most K per call.')
flags.DEFINE_integer('calls', 5, 'Timed calls per setting.')
flags.DEFINE_integer('warmup', 1, 'Untimed calls first.')
flags.DEFINE_string('csv', '', 'Also write the rows to this CSV file (written after each row).')
FLAGS = flags.FLAGS


def main(argv):
  del argv
  logs.quiet()
  counts = [int(c) for c in FLAGS.clients_list]
  ds, clients = common.load_clients(FLAGS.dataset, FLAGS.cache_dir, max(counts), FLAGS.examples)
  print(f'{FLAGS.algorithm} on {FLAGS.dataset}, {FLAGS.examples} examples per client; per round: '
        f'median [min-max] of {FLAGS.calls} calls after {FLAGS.warmup} warm-up; {common.machine()}')
  header = ['model', 'parameters', 'clients', 'mode', *common.TIMING_HEADER, 'state diff',
            'load average']
  common.table(header)
  rows = []
  with WorkerPool.local(1) as pool:
    for name in FLAGS.models:
      model = build_model_spec(name, ds.element_shape, ds.num_classes, x_dtype=ds.x_dtype)
      alg = common.build_algorithm(FLAGS.algorithm, model)
      for n in counts:
        batch = client_data.round_data(alg.train_data, clients[:n], 0, 1)
        for mode in FLAGS.modes:
          t, check = common.time_setting(alg, batch, mode, pool, FLAGS.calls, FLAGS.warmup)
          row = [name, f'{model.num_parameters:,}', str(n), mode, *common.timing_cells(t),
                 f'{check:.1e}', f'{os.getloadavg()[0]:.1f}']
          print('| ' + ' | '.join(row) + ' |', flush=True)
          rows.append(row)
          if FLAGS.csv:
            common.write_csv(FLAGS.csv, header, rows)


if __name__ == '__main__':
  app.run(main)
