r"""Every speed and memory ratio the results page judges, in one run (issue 69).

  python -m benchmarks.ratios --calls=3 --rounds=3 --output_dir=docs/runs/ratios   # generated data
  python -m benchmarks.ratios --cache_dir=<folder of emnist_all.sqlite> --output_dir=<dir>
  python -m benchmarks.ratios --quick --output_dir=/tmp/ratios        # tiny sizes (the test's)

Three parts, each TFF against the same math in one plain-TF graph
(`common.plain_tf_round`), on the default path (`programs.train` with no flag);
the first two share one local TFF worker, stopped before the third starts:

- `4 clients`: FedAvg and FedMeta (MAML, FOMAML, Meta-SGD) on the FEMNIST CNN,
  --clients4 clients x --examples examples (`round_overhead`'s setting);
- `64 clients`: FedMeta(MAML) on the FEMNIST CNN and the MLP at --clients64
  clients (`scaling`'s setting).

  Both time --calls calls after --warmup, TFF and plain TF alternating call by
  call (`common.time_setting`, which also checks that both compute the same state);
- `Table 2 cell`: each FEMNIST Table 2 config (`configs/fedmeta/table2_femnist_p*.toml`,
  --cells), run by `programs.train` for --rounds rounds (evaluated at round 0
  and at the last, as a run is), one at a time. The peak is the sum of the
  peak resident sets (VmHWM) of the program and its TFF worker, an upper
  bound of what the two hold at once; s/round the median `round_seconds` of
  rounds 2.. (round 1 builds the graphs). Plain TF then runs the *same* rounds
  (the program's `RoundSampler`, seed and clients) in a process of its own.

Without --cache_dir the EMNIST data are generated (`make_emnist_like`,
--writers writers of 200 examples on average, like FEMNIST's 226) into a
temporary folder. Writes `ratios.csv` (one row per setting, written after each
row; the last column is the load average when it was measured) and
`ratios.md` (the machine, the command, the code, `uptime` before and after,
the table) to --output_dir. Start it as `benchmarks/scaling.py` explains
(`setsid`, an autogroup at the niceness you want) on a shared machine.
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from absl import app, flags  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from benchmarks import common, processes  # noqa: E402
from tff_meta.classification import config as config_lib, experiment  # noqa: E402
from tff_meta.classification.training_loop import RoundSampler  # noqa: E402
from tff_meta.core import logs, provenance  # noqa: E402
from tff_meta.core.tables import markdown_table  # noqa: E402
from tff_meta.data import client_data  # noqa: E402
from tff_meta.models import build_model_spec  # noqa: E402
from tff_meta.runtime.pool import WorkerPool  # noqa: E402

MODEL_NAMES = {'femnist_cnn': 'FEMNIST CNN', 'mlp': 'MLP'}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELLS = 'configs/fedmeta/table2_femnist_p*.toml'

flags.DEFINE_string('cache_dir', '', 'Folder of emnist_all.sqlite; generated when empty.')
flags.DEFINE_integer('writers', 200, 'Writers of the generated data.')
flags.DEFINE_list('algorithms', ['fedavg', 'fedmeta_maml', 'fedmeta_fomaml', 'fedmeta_metasgd'],
                  'Algorithms at --clients4 clients.')
flags.DEFINE_string('model4', 'femnist_cnn', 'Model at --clients4 clients.')
flags.DEFINE_integer('clients4', 4, 'Clients per round of the first part (the papers\').')
flags.DEFINE_list('models64', ['femnist_cnn', 'mlp'], 'Models at --clients64 clients.')
flags.DEFINE_integer('clients64', 64, 'Clients per round of the second part.')
flags.DEFINE_integer('examples', 100, 'Examples per client in the first two parts.')
flags.DEFINE_integer('calls', 5, 'Timed calls per setting of the first two parts.')
flags.DEFINE_integer('warmup', 1, 'Untimed calls first.')
flags.DEFINE_list('cells', [], f'Table 2 configs to run (default: every {CELLS}).')
flags.DEFINE_integer('rounds', 4, 'Rounds of each Table 2 cell.')
flags.DEFINE_list('train_flags', [], 'More flags for each cell\'s programs.train.')
flags.DEFINE_float('poll_s', 0.2, 'Seconds between reads of the cells\' VmHWM.')
flags.DEFINE_bool('quick', False, 'Tiny sizes (a test of the command, not a measurement): '
                  'the MLP, 2 and 4 clients of 20 examples, one call, one cell of 2 rounds on '
                  'the MLP, 30 generated writers.')
flags.DEFINE_string('output_dir', 'ratios_out', 'Folder for ratios.csv and ratios.md.')
flags.DEFINE_string('plain_cell', '', 'Internal: time this config\'s plain-TF rounds and print '
                    'them as one JSON line (each cell runs it in a process of its own).')
FLAGS = flags.FLAGS

HEADER = ['part', 'setting', 'clients', *common.TIMING_HEADER, 'program peak MB',
          'worker peak MB', 'peak MB', 'load average']
QUICK = {'writers': 30, 'model4': 'mlp', 'clients4': 2, 'models64': ['mlp'], 'clients64': 4,
         'examples': 20, 'calls': 1, 'warmup': 1, 'rounds': 2,
         'cells': ['configs/fedmeta/table2_femnist_p20_maml.toml'],
         'train_flags': ['--model=mlp']}


def generate(folder: str, writers: int) -> str:
  """An EMNIST-shaped sqlite file of `writers` generated writers in `folder`; returns it."""
  subprocess.run([sys.executable, '-m', 'benchmarks.make_emnist_like', f'--clients={writers}',
                  f'--output={os.path.join(folder, "emnist_all.sqlite")}'],
                 check=True, cwd=REPO, stdout=subprocess.DEVNULL)
  return folder


def _label(model: str, method: str) -> str:
  return f'{MODEL_NAMES.get(model, model)}, {method}'


def _row(part, setting, clients, timing, peaks=('', '', '')):
  return [part, setting, str(clients), *timing, *peaks, f'{os.getloadavg()[0]:.1f}']


def timed_rows(pool, cache_dir: str):
  """The 4-client and 64-client rows (`common.time_setting`, default path)."""
  counts = (FLAGS.clients4, FLAGS.clients64)
  ds, clients = common.load_clients('emnist', cache_dir, max(counts), FLAGS.examples)
  settings = [(f'{FLAGS.clients4} clients', FLAGS.model4, name, FLAGS.clients4)
              for name in FLAGS.algorithms]
  settings += [(f'{FLAGS.clients64} clients', model, 'fedmeta_maml', FLAGS.clients64)
               for model in FLAGS.models64]
  for part, model_name, name, n in settings:
    model = build_model_spec(model_name, ds.element_shape, ds.num_classes, x_dtype=ds.x_dtype)
    alg = common.build_algorithm(name, model)
    batch = client_data.round_data(alg.train_data, clients[:n], 0, 1)
    times, _ = common.time_setting(alg, batch, 'default', pool, FLAGS.calls, FLAGS.warmup)
    label = _label(model_name, alg.display_name)
    yield _row(part, label, n, common.timing_cells(times))


def plain_cell_seconds(config: str, cache_dir: str, pool) -> dict:
  """Plain TF's wall seconds of each of the cell's rounds, on the rounds the program ran; the
  cell's label and clients per round."""
  overrides = {'cache_dir': cache_dir, 'rounds': FLAGS.rounds}
  for item in FLAGS.train_flags:   # --key=value flags the program also took
    key, _, value = item.lstrip('-').partition('=')
    overrides[key] = value
  cfg = config_lib.load(os.path.join(REPO, config), overrides)
  data = experiment.prepare_data(cfg)
  alg = experiment.build_algorithm(cfg, experiment.build_model(cfg, data), data)
  sampler = RoundSampler(alg.train_data, data.train, cfg.clients_per_round, cfg.seed,
                         cfg.resample_support, cfg.max_client_examples)
  with tff.framework.get_context_stack().install(pool.context):
    initial = alg.process.initialize()
  step, _, close = common.plain_tf_round(alg.process, initial, sampler.sample(1).batch)
  seconds = []
  try:
    for r in range(1, FLAGS.rounds + 1):
      batch = sampler.sample(r).batch
      with common.Clock() as clock:
        step(batch)
      seconds.append(clock.wall)
  finally:
    close()
  return {'setting': f'p={cfg.support_fraction:.0%}, {_label(cfg.model, alg.display_name)}',
          'clients': cfg.clients_per_round, 'seconds': seconds}


def plain_cell(config: str, cache_dir: str) -> dict:
  """`plain_cell_seconds` in a process of its own (`--plain_cell`): each cell's data, graphs
  and traced computations leave with it (kept in this one, 14 cells held 6 GB)."""
  out = subprocess.run([sys.executable, '-m', 'benchmarks.ratios', f'--plain_cell={config}',
                        f'--cache_dir={cache_dir}', f'--rounds={FLAGS.rounds}',
                        f'--train_flags={",".join(FLAGS.train_flags)}'],
                       cwd=REPO, check=True, capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def cell_rows(cache_dir: str, tmp: str):
  """One row per Table 2 cell: its peak memory and s/round against plain TF's."""
  for i, config in enumerate(FLAGS.cells or sorted(
      os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, CELLS)))):
    run = processes.run_program(config, FLAGS.rounds, os.path.join(tmp, f'cell{i}'),
                                [f'--cache_dir={cache_dir}', *FLAGS.train_flags], cwd=REPO,
                                poll_s=FLAGS.poll_s)
    cell = plain_cell(config, cache_dir)
    plain = cell['seconds']
    tff_s = [float(r['round_seconds']) for r in run.metrics]
    later = slice(1, None) if len(tff_s) > 1 else slice(None)
    tff_med, ref_med = statistics.median(tff_s[later]), statistics.median(plain[later])
    timing = [common.fmt(tff_s[later]), common.fmt(plain[later]), f'{tff_med / ref_med:.2f}',
              '', '', '']
    yield _row('Table 2 cell', cell['setting'], cell['clients'], timing,
               (f'{run.program_peak_mb:.0f}', f'{run.worker_peak_mb:.0f}',
                f'{run.program_peak_mb + run.worker_peak_mb:.0f}'))


def uptime() -> str:
  with open('/proc/loadavg') as f:
    return 'load average ' + ', '.join(f.read().split()[:3])


def main(argv):
  del argv
  logs.quiet()
  if FLAGS.plain_cell:   # one cell's plain-TF rounds, for `plain_cell`: one JSON line
    with WorkerPool.local(1) as pool:
      print(json.dumps(plain_cell_seconds(FLAGS.plain_cell, FLAGS.cache_dir, pool)))
    return
  if FLAGS.quick:
    for key, value in QUICK.items():
      FLAGS[key].value = value
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  csv_path = os.path.join(FLAGS.output_dir, 'ratios.csv')
  start = (f'{common.machine()}; code {provenance.code_version()}; before: {uptime()}; '
           f'command: python -m benchmarks.ratios {" ".join(sys.argv[1:])}')
  print(start, flush=True)
  common.table(HEADER)
  rows = []

  def emit(row):
    print('| ' + ' | '.join(row) + ' |', flush=True)
    rows.append(row)
    common.write_csv(csv_path, HEADER, rows)
  with tempfile.TemporaryDirectory() as tmp:
    cache_dir = FLAGS.cache_dir or generate(os.path.join(tmp, 'data'), FLAGS.writers)
    with WorkerPool.local(1) as pool:   # stopped before the cells run their own
      for row in timed_rows(pool, cache_dir):
        emit(row)
    for row in cell_rows(cache_dir, tmp):
      emit(row)
  data = (f'EMNIST data: {FLAGS.cache_dir}' if FLAGS.cache_dir else
          f'EMNIST data generated: {FLAGS.writers} writers (benchmarks/make_emnist_like)')
  with open(os.path.join(FLAGS.output_dir, 'ratios.md'), 'w', encoding='utf-8') as f:
    f.write(f'{start}\n\n{data}; after: {uptime()}\n\n{markdown_table(HEADER, rows)}\n')
  print(f'after: {uptime()}; wrote {csv_path}', flush=True)


if __name__ == '__main__':
  app.run(main)
