r"""Times loading an EMNIST file and building 10 clients' round data; start-up and peak memory.

  python -m benchmarks.data_loading --cache_dir=<tff data folder>
  python -m benchmarks.data_loading --cache_dir=<folder> --read=bulk --repeats=0 \
      --rounds=20 --csv=docs/runs/data_on_demand/results.csv --label=1k
  python -m benchmarks.data_loading --cache_dir=<folder> --check_cost \
      --startup_config=configs/fedmeta/table2_femnist_p20_fedavg.toml \
      --csv=docs/runs/data_check/results.csv --label=femnist308

--check_cost times the data check (`tff_meta.data.checks`) instead: every
client of the file is read once and checked, the check timed apart from the
read, against a run's start-up plus first round (`programs.train
--startup_config=... --rounds=1`, timed as a child process, wall clock). A run
checks only the clients it reads, so the check of every client is an upper
bound of what it adds.

Building a round's client datasets must never dominate a
round. This measures, in one process:

  import  `import tensorflow` and the data modules (once per process);
  load    `load_dataset('emnist', cache_dir=...)` (TFF's emnist_all.sqlite,
          split 'all', 62 classes): the first call (includes TensorFlow's
          parser warm-up) and the median of --repeats further calls;
  prepare `protocol.prepare` (FedMeta: min_samples, 80/10/10 clients,
          support fraction);
  round   `program.client_data.round_data(kind, clients, seed, round)` for
          --clients_per_round clients drawn with `sample_clients`, median
          and max over --rounds rounds, for kinds 'episode' (FedMeta) and
          'full' (FedAvg: all of a client's data, shuffled);
  eval    the episodes of the first --eval_clients test clients;
  memory  the process's peak resident memory (VmHWM) after start-up (load +
          prepare) and at the end, and its resident memory before the load.

--read=on_demand (the default) loads as the programs do: ids, counts and
rowid ranges at start, a client's examples when used (`lazy_clients`, cache
--cache_mb); --read=bulk reads every client into memory first
(`tff_sqlite.read_clients`, the path every run took before clients were read
on demand). Peak memory is per process: run one process per setting. --csv
appends one row per run.
"""

import csv
import os
import platform
import statistics
import time
import tracemalloc

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import app, flags, logging  # noqa: E402

flags.DEFINE_string('cache_dir', os.path.expanduser('~/.tff'), 'Folder holding emnist_all.sqlite.')
flags.DEFINE_bool('via_tff', False, 'Also time one load through TFF\'s ClientData (slow).')
flags.DEFINE_integer('repeats', 3, 'Timed loads after the first.')
flags.DEFINE_integer('clients_per_round', 10, 'Clients per round.')
flags.DEFINE_integer('rounds', 200, 'Rounds to time round_data over.')
flags.DEFINE_float('support_fraction', 0.2, 'Support fraction p.')
flags.DEFINE_integer('min_samples', 10, 'Protocol filter k (FedMeta FEMNIST: 10).')
flags.DEFINE_enum('read', 'on_demand', ['on_demand', 'bulk'],
                  'on_demand: as the programs load; bulk: every client read into memory first.')
flags.DEFINE_float('cache_mb', 256, 'The on-demand cache (load_emnist\'s cache_mb).')
flags.DEFINE_integer('eval_clients', 100, 'Test clients whose episodes are built once.')
flags.DEFINE_bool('trace_memory', False, 'Trace Python and numpy allocations during start-up '
                  '(tracemalloc: what the index, sizes and splits hold, without TensorFlow\'s '
                  'and the shared libraries\' pages; slower).')
flags.DEFINE_bool('check_cost', False, 'Time the data check on every client instead (above).')
flags.DEFINE_string('startup_config', '', 'With --check_cost: the config whose programs.train '
                    'start-up and first round the check is compared with.')
flags.DEFINE_string('csv', '', 'Append a row of the results to this CSV file.')
flags.DEFINE_string('label', '', 'The CSV row\'s label (e.g. the file\'s size).')
FLAGS = flags.FLAGS


def _memory_mb(key):
  """VmHWM (peak) or VmRSS (now) of this process, in MB, from /proc/self/status."""
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith(key + ':'):
        return int(line.split()[1]) / 1024
  raise RuntimeError(f'{key} not in /proc/self/status')


def _bulk_emnist(cache_dir):
  """Every client read into memory, as `load_emnist` did before clients were read on demand."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_meta.data import tff_native, tff_sqlite  # pylint: disable=g-import-not-at-top
  from tff_meta.data.types import ClientArrays, FederatedDataset  # pylint: disable=g-import-not-at-top
  per_client = tff_sqlite.read_clients(os.path.join(cache_dir, tff_native.EMNIST_FILE),
                                       ('all_train', 'all_test'), 0, tff_native._EMNIST_SPEC)
  clients = {}
  for cid in list(per_client):
    parts = per_client.pop(cid)
    clients[cid] = ClientArrays(
        np.concatenate([p['pixels'] for p in parts]).astype(np.float32),
        np.concatenate([p['label'] for p in parts]).astype(np.int32))
  return FederatedDataset('emnist', clients, 62, (28, 28))


def _timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def _append_row(row):
  new = not os.path.exists(FLAGS.csv)
  with open(FLAGS.csv, 'a', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(row))
    if new:
      writer.writeheader()
    writer.writerow(row)


def _check_cost():
  """The data check's time on every client of the file, and a run's start-up plus first round."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  from tff_meta.data import checks, load_dataset  # pylint: disable=g-import-not-at-top
  dataset, load_s = _timed(lambda: load_dataset('emnist', cache_dir=FLAGS.cache_dir,
                                                cache_mb=0, download=False))
  clients, spec = dataset.clients, (dataset.element_shape, dataset.num_classes, dataset.x_range)
  clients.check = None   # read unchecked; the check is timed below
  read_s = check_s = 0.0
  for cid in clients:
    arrays, t = _timed(lambda: clients[cid])   # pylint: disable=cell-var-from-loop
    read_s += t
    problem, t = _timed(  # pylint: disable=cell-var-from-loop
        lambda: checks.client_problem(arrays, *spec))
    check_s += t
    assert problem is None, (cid, problem)
  print(f'{len(clients)} clients, {dataset.num_examples} examples: index {load_s:.2f} s, reading '
        f'every client {read_s:.2f} s, checking every client {check_s * 1000:.1f} ms '
        f'({check_s / len(clients) * 1e6:.0f} us a client)')
  row = {'label': FLAGS.label, 'clients': len(clients), 'examples': dataset.num_examples,
         'index_s': round(load_s, 2), 'read_all_s': round(read_s, 2),
         'check_all_ms': round(check_s * 1000, 1)}
  if FLAGS.startup_config:
    with tempfile.TemporaryDirectory() as out:
      command = [sys.executable, '-m', 'programs.train', f'--config={FLAGS.startup_config}',
                 '--rounds=1', '--eval_every=1', '--checkpoint_every=1', '--progress=false',
                 f'--cache_dir={FLAGS.cache_dir}', '--no_download', f'--output_dir={out}/run']
      done, run_s = _timed(lambda: subprocess.run(command, capture_output=True, text=True))
    if done.returncode != 0:
      raise RuntimeError(f'programs.train failed: {done.stderr[-2000:]}')
    print(f'programs.train start-up + first round ({FLAGS.startup_config}): {run_s:.1f} s; the '
          f'check of every client is {check_s / run_s:.2%} of it')
    row.update(startup_config=FLAGS.startup_config, startup_first_round_s=round(run_s, 1),
               check_share_pct=round(100 * check_s / run_s, 3))
  row['load_avg_1m'] = os.getloadavg()[0]
  if FLAGS.csv:
    _append_row(row)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  if FLAGS.check_cost:
    _check_cost()
    return
  start = time.perf_counter()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_meta.data import load_dataset, protocol  # pylint: disable=g-import-not-at-top
  from tff_meta.data import tff_native  # noqa: F401  pylint: disable=g-import-not-at-top
  from tff_meta.data import client_data  # pylint: disable=g-import-not-at-top
  imports = time.perf_counter() - start

  print(f'python {platform.python_version()}, tensorflow {tf.__version__}, numpy '
        f'{np.__version__}, {os.cpu_count()} CPUs, {platform.machine()}')
  print(f'import tensorflow + tff_meta data modules: {imports:.2f} s')
  rss_before = _memory_mb('VmRSS')
  if FLAGS.trace_memory:
    tracemalloc.start()
  if FLAGS.read == 'bulk':
    load = lambda: _bulk_emnist(FLAGS.cache_dir)
  else:
    load = lambda: load_dataset('emnist', cache_dir=FLAGS.cache_dir, cache_mb=FLAGS.cache_mb,
                                download=False)
  dataset, first = _timed(load)
  later = [_timed(load)[1] for _ in range(FLAGS.repeats)]
  print(f'load emnist, {FLAGS.read} ({len(dataset.clients)} clients, {dataset.num_examples} '
        f'examples): first {first:.2f} s'
        + (f', then median {statistics.median(later):.2f} s over {len(later)} loads'
           if later else ''))
  if FLAGS.via_tff:
    import tensorflow_federated  # noqa: F401  pylint: disable=g-import-not-at-top
    _, t = _timed(lambda: load_dataset('emnist', cache_dir=FLAGS.cache_dir, via_tff=True))
    print(f'load emnist via TFF ClientData: {t:.2f} s')

  data, prep = _timed(lambda: protocol.prepare(
      dataset, support_fraction=FLAGS.support_fraction, min_samples=FLAGS.min_samples, seed=0))
  print(f'protocol.prepare: {prep * 1000:.1f} ms ({data.summary()})')
  rss_start, peak_start = _memory_mb('VmRSS'), _memory_mb('VmHWM')
  traced = ('', '')
  if FLAGS.trace_memory:
    traced = tuple(round(b / 2**20, 2) for b in tracemalloc.get_traced_memory())
    tracemalloc.stop()
    print(f'traced allocations held after start-up: {traced[0]} MB (peak {traced[1]} MB)')
  print(f'memory: {rss_before:.0f} MB resident before the load, {rss_start:.0f} MB after '
        f'start-up (peak {peak_start:.0f} MB)')

  medians = {}
  for kind in ('episode', 'full'):
    times = []
    for r in range(FLAGS.rounds):
      picked = client_data.sample_clients(len(data.train), FLAGS.clients_per_round, 0, r)
      clients = [data.train[i] for i in picked]
      _, t = _timed(lambda: client_data.round_data(kind, clients, 0, r))
      times.append(t)
    medians[kind] = statistics.median(times) * 1000
    print(f"round_data('{kind}', {FLAGS.clients_per_round} clients): median "
          f'{medians[kind]:.3f} ms, max {max(times) * 1000:.3f} ms '
          f'over {FLAGS.rounds} rounds')
  evaluated = data.test[:FLAGS.eval_clients]
  _, eval_s = _timed(lambda: [client_data.episode(c) for c in evaluated])
  print(f'episodes of {len(evaluated)} test clients: {eval_s:.2f} s')
  peak = _memory_mb('VmHWM')
  reads = getattr(dataset.clients, 'reads', len(dataset.clients))
  print(f'memory: peak {peak:.0f} MB; clients read from the file: {reads}; in the cache: '
        f'{getattr(dataset.clients, "cached_bytes", 0) / 2**20:.1f} MB')
  if FLAGS.csv:
    row = {'label': FLAGS.label, 'read': FLAGS.read, 'clients': len(dataset.clients),
           'examples': dataset.num_examples,
           'file_gib': round(os.path.getsize(os.path.join(FLAGS.cache_dir, 'emnist_all.sqlite'))
                             / 2**30, 2),
           'load_s': round(first, 2), 'prepare_s': round(prep, 3),
           'startup_s': round(first + prep, 2), 'rss_before_load_mb': round(rss_before),
           'rss_after_startup_mb': round(rss_start), 'peak_after_startup_mb': round(peak_start),
           'peak_mb': round(peak), 'traced_startup_mb': traced[0],
           'traced_startup_peak_mb': traced[1], 'episode_round_ms': round(medians['episode'], 2),
           'full_round_ms': round(medians['full'], 2), 'eval_clients': len(evaluated),
           'eval_s': round(eval_s, 2), 'clients_read': reads, 'cache_mb': FLAGS.cache_mb,
           'cached_mb_at_end': round(getattr(dataset.clients, 'cached_bytes', 0) / 2**20, 1),
           'load_avg_1m': os.getloadavg()[0]}
    _append_row(row)


if __name__ == '__main__':
  app.run(main)
