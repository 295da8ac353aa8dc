r"""Runs one TFF C++ executor worker for a worker pool, until SIGTERM or SIGINT.

  python -m programs.worker --port=8000        # on each worker host
  python -m programs.train --config=... --executor=workers --workers=host1:8000,host2:8000

This is TFF's own `worker_binary` (the remote executor service), started and
stopped by PID. Ctrl-C or SIGTERM stops it; so does the death of this
process, even by SIGKILL (Linux). The trainer splits each round's clients
across the pool with TFF's mergeable-computation context.
"""

import signal
import time

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402

from tff_meta.core import cli  # noqa: E402
from tff_meta.runtime.workers import WorkerProcess  # noqa: E402

flags.DEFINE_integer('port', 8000, 'Port to serve the TFF executor service on.', lower_bound=1,
                     upper_bound=65535)
flags.DEFINE_integer('max_concurrent_calls', -1, 'Computation calls the worker runs at once '
                     '(its --max_concurrent_computation_calls); -1 = no bound. A small bound '
                     'caps the memory of rounds with many large clients (Shakespeare).')
# --log_dir (the worker log's folder; default: the temp folder) is absl.logging's own flag.
FLAGS = flags.FLAGS


def main(argv):
  del argv
  stop = []
  signal.signal(signal.SIGINT, lambda *_: stop.append(1))
  signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
  try:
    worker = WorkerProcess(port=FLAGS.port, log_dir=FLAGS.log_dir or None,
                           max_concurrent_calls=FLAGS.max_concurrent_calls)
  except (RuntimeError, ValueError) as e:
    cli.fail(e)
  print(f'TFF worker serving on port {worker.port} (pid {worker.pid}); log {worker.log_path}',
        flush=True)
  try:
    while not stop:
      if worker.process.poll() is not None:
        cli.fail(f'the worker exited with code {worker.process.returncode}; '
                 f'see {worker.log_path}.')
      time.sleep(0.2)
  finally:
    worker.stop()
  print('TFF worker stopped.', flush=True)


if __name__ == '__main__':
  cli.run(main)
