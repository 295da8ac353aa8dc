r"""Peak memory of the TFF worker over the first rounds of whole training runs.

  python -m benchmarks.worker_memory --cache_dir=<folder of emnist_all.sqlite> \
      --configs=configs/fedmeta/table2_femnist_p20_metasgd.toml --rounds=20 \
      --label=after --csv=docs/runs/worker_memory/peaks.csv
  python -m benchmarks.worker_memory ... --worker_env=TF_ONEDNN_USE_SYSTEM_ALLOCATOR=0 --label=before
  python -m benchmarks.worker_memory ... --label=sized \
      --train_flags=--worker_memory_mb=2000 \
      --worker_env=TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1,MALLOC_MMAP_THRESHOLD_=1048576

Runs `programs.train` on each config for --rounds rounds (evaluating at round
0 and at the last round, as a run does), one run at a time, and reads the
peak resident set (VmHWM, /proc/<pid>/status) of the worker it starts every
--poll_s seconds until the run ends. Prints and appends to --csv, per run: the
config, the label, the worker environment given, the rounds, the worker's
peak, its resident set (VmRSS) after the last round (metrics.csv), the median
seconds per round of rounds 2.. (round 1 builds the graphs), the CPU seconds the
worker used over the whole run (less sensitive to other jobs), the load average
at start and end, the last round's train loss and the last test accuracy (to
compare two settings' results) and the commit of --code_dir (`+dirty` with
uncommitted changes). The run is `processes.run_program`. --worker_env sets
variables in the program's environment; `WorkerProcess` lets them win over its
defaults (`runtime/workers.py`), so one code version measures both settings;
--code_dir=<another checkout> measures that checkout's code. The third line
measures the default of a machine with less than 16 GiB on a larger one: its
allocator settings and its worker memory budget (`runtime/execution_plan.py`).
"""

import csv
import os
import statistics
import tempfile

from absl import app, flags

from benchmarks import processes
from tff_meta.core import files, provenance

flags.DEFINE_list('configs', [], 'Config files to run.')
flags.DEFINE_string('cache_dir', None, 'Folder of the TFF sqlite files.')
flags.DEFINE_integer('rounds', 20, 'Rounds per run.')
flags.DEFINE_list('worker_env', [], 'KEY=VALUE items set for the program (and so its worker).')
flags.DEFINE_list('train_flags', [], 'More flags for programs.train, e.g. --max_concurrent_calls=1.')
flags.DEFINE_string('code_dir', '.', 'Checkout whose programs.train runs (e.g. another '
                    'worktree, to measure its code); its configs are read from there too.')
flags.DEFINE_string('label', '', 'A name for the setting measured (a CSV column).')
flags.DEFINE_string('csv', '', 'CSV to append the rows to (created with a header).')
flags.DEFINE_float('poll_s', 0.2, 'Seconds between reads of the worker\'s VmHWM.')
FLAGS = flags.FLAGS

HEADER = ['config', 'label', 'worker_env', 'train_flags', 'rounds', 'peak_worker_rss_mb',
          'last_round_worker_rss_mb', 'median_s_per_round', 'worker_cpu_s', 'load_start',
          'load_end',
          'last_train_loss', 'last_test_accuracy', 'commit']


def run_config(config: str, output_dir: str, env: dict) -> dict:
  """Runs one config (`processes.run_program`); returns the worker's peak and the run's
  per-round numbers."""
  flags_ = [*FLAGS.train_flags, *([f'--cache_dir={FLAGS.cache_dir}'] if FLAGS.cache_dir else [])]
  load_start = os.getloadavg()[0]
  run = processes.run_program(config, FLAGS.rounds, output_dir, flags_, cwd=FLAGS.code_dir,
                              env=env, poll_s=FLAGS.poll_s)
  rows = run.metrics
  with open(os.path.join(output_dir, 'eval.csv')) as f:
    evaluation = list(csv.DictReader(f))
  seconds = [float(r['round_seconds']) for r in rows[1:]] or [float(rows[0]['round_seconds'])]
  return {'peak_worker_rss_mb': f'{run.worker_peak_mb * 2**20 / 1e6:.0f}',
          'last_round_worker_rss_mb': f'{float(rows[-1]["worker_rss_mb"]):.0f}',
          'median_s_per_round': f'{statistics.median(seconds):.3f}',
          'worker_cpu_s': f'{run.worker_cpu_s:.1f}',
          'load_start': f'{load_start:.1f}', 'load_end': f'{os.getloadavg()[0]:.1f}',
          'last_train_loss': rows[-1]['train_loss'],
          'last_test_accuracy': evaluation[-1]['test_accuracy']}


def main(argv):
  del argv
  bad = [kv for kv in FLAGS.worker_env if '=' not in kv]
  if bad or not FLAGS.configs:
    raise app.UsageError('--configs is required; --worker_env items are KEY=VALUE.')
  env = dict(kv.split('=', 1) for kv in FLAGS.worker_env)
  rows = []
  if FLAGS.csv and os.path.exists(FLAGS.csv):
    with open(FLAGS.csv, newline='') as f:
      rows = [list(r) for r in csv.reader(f)][1:]
  print(' | '.join(HEADER), flush=True)
  csv_path = os.path.abspath(FLAGS.csv) if FLAGS.csv else ''
  with tempfile.TemporaryDirectory() as tmp:
    for i, config in enumerate(FLAGS.configs):
      numbers = run_config(config, os.path.join(tmp, str(i)), env)
      row = {'config': config, 'label': FLAGS.label, 'worker_env': ' '.join(FLAGS.worker_env),
             'train_flags': ' '.join(FLAGS.train_flags), 'rounds': str(FLAGS.rounds),
             **numbers, 'commit': provenance.code_version(FLAGS.code_dir)}
      print(' | '.join(row[k] for k in HEADER), flush=True)
      rows.append([row[k] for k in HEADER])
      if csv_path:
        os.makedirs(os.path.dirname(csv_path), exist_ok=True)
        with files.atomic_open(csv_path, 'w', newline='') as f:
          writer = csv.writer(f)
          writer.writerow(HEADER)
          writer.writerows(rows)


if __name__ == '__main__':
  app.run(main)
