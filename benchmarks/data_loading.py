r"""Times loading the shared EMNIST file and building 10 clients' round data.

  python -m benchmarks.data_loading --cache_dir=<tff data folder>

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
          'full' (FedAvg: all of a client's data, shuffled).
"""

import os
import platform
import statistics
import time

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
FLAGS = flags.FLAGS


def _timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
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
  load = lambda: load_dataset('emnist', cache_dir=FLAGS.cache_dir)
  dataset, first = _timed(load)
  later = [_timed(load)[1] for _ in range(FLAGS.repeats)]
  print(f'load emnist ({len(dataset.clients)} clients, {dataset.num_examples} examples): '
        f'first {first:.2f} s, then median {statistics.median(later):.2f} s '
        f'over {len(later)} loads')
  if FLAGS.via_tff:
    import tensorflow_federated  # noqa: F401  pylint: disable=g-import-not-at-top
    _, t = _timed(lambda: load_dataset('emnist', cache_dir=FLAGS.cache_dir, via_tff=True))
    print(f'load emnist via TFF ClientData: {t:.2f} s')

  data, prep = _timed(lambda: protocol.prepare(
      dataset, support_fraction=FLAGS.support_fraction, min_samples=FLAGS.min_samples, seed=0))
  print(f'protocol.prepare: {prep * 1000:.1f} ms ({data.summary()})')

  for kind in ('episode', 'full'):
    times = []
    for r in range(FLAGS.rounds):
      picked = client_data.sample_clients(len(data.train), FLAGS.clients_per_round, 0, r)
      clients = [data.train[i] for i in picked]
      _, t = _timed(lambda: client_data.round_data(kind, clients, 0, r))
      times.append(t)
    print(f"round_data('{kind}', {FLAGS.clients_per_round} clients): median "
          f'{statistics.median(times) * 1000:.3f} ms, max {max(times) * 1000:.3f} ms '
          f'over {FLAGS.rounds} rounds')


if __name__ == '__main__':
  app.run(main)
