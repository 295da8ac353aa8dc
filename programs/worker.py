r"""Runs one TFF C++ executor worker for a worker pool, until SIGTERM or SIGINT.

  python -m programs.worker --port=8000        # on each worker host
  python -m programs.train --config=... --executor=workers --workers=host1:8000,host2:8000

With mutual TLS (docs/DEPLOY.md, "Mutual TLS"):

  python -m programs.worker --make_certs=pool_certs --hosts=host1,host2      # once
  python -m programs.worker --port=8443 --tls_ca=pool_certs/ca.crt \
      --tls_cert=pool_certs/worker.crt --tls_key=pool_certs/worker.key
  python -m programs.train ... --workers=host1:8443,host2:8443 --workers_tls_ca=pool_certs/ca.crt \
      --workers_tls_cert=pool_certs/trainer.crt --workers_tls_key=pool_certs/trainer.key

This is TFF's own `worker_binary` (the remote executor service), started and
stopped by PID. With TLS it serves on a loopback port behind gRPC's own TLS,
which admits only clients whose certificate the pool's CA signed
(tff_meta/runtime/tls.py). Ctrl-C or SIGTERM stops it; so does the death of
this process, even by SIGKILL (Linux). The trainer splits each round's
clients across the pool with TFF's mergeable-computation context.
"""

import signal
import subprocess
import sys
import time

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402

from tff_meta.core import cli  # noqa: E402
from tff_meta.runtime import cert_files, netns, tls  # noqa: E402
from tff_meta.runtime.workers import (PortInUseError, WorkerProcess, log_tail,  # noqa: E402
                                      port_in_use)

flags.DEFINE_integer('port', 8000, 'Port to serve the TFF executor service on.', lower_bound=1,
                     upper_bound=65535)
flags.DEFINE_integer('max_concurrent_calls', -1, 'Computation calls the worker runs at once '
                     '(its --max_concurrent_computation_calls); -1 = no bound. A small bound '
                     'caps the memory of rounds with many large clients (Shakespeare).')
flags.DEFINE_string('tls_ca', None, 'Mutual TLS: the pool\'s CA certificate (PEM); only clients '
                    'whose certificate it signed are admitted.')
flags.DEFINE_string('tls_cert', None, 'Mutual TLS: this worker\'s certificate (PEM).')
flags.DEFINE_string('tls_key', None, 'Mutual TLS: this worker\'s private key (PEM).')
flags.DEFINE_string('make_certs', None, 'Instead of serving: write a new CA and the pool\'s '
                    'certificates (ca, worker, trainer; keys mode 0600) into this folder, and exit.')
flags.DEFINE_list('hosts', [], 'With --make_certs: the workers\' host names or IP addresses, as '
                  'the trainer names them in --workers (localhost and 127.0.0.1 are added).')
flags.DEFINE_integer('cert_days', 365, 'With --make_certs: days the certificates are valid.')
# --log_dir (the worker log's folder; default: the temp folder) is absl.logging's own flag.
FLAGS = flags.FLAGS


def _warn(message: str) -> None:
  print(f'warning: {message}', file=sys.stderr, flush=True)


def make_certs() -> None:
  try:
    paths = cert_files.make_pool_certs(FLAGS.make_certs, FLAGS.hosts, days=FLAGS.cert_days)
  except (ValueError, FileExistsError) as e:
    cli.fail(e)
  print(f'Wrote a CA and the pool\'s certificates to {FLAGS.make_certs}:')
  print(f'  workers: --tls_ca={paths["ca.crt"]} --tls_cert={paths["worker.crt"]} '
        f'--tls_key={paths["worker.key"]}')
  print(f'  trainer: --workers_tls_ca={paths["ca.crt"]} --workers_tls_cert={paths["trainer.crt"]} '
        f'--workers_tls_key={paths["trainer.key"]}')
  print(f'Keep {paths["ca.key"]} off the workers and the trainer; it signs new certificates.')


def _start_worker(files) -> WorkerProcess:
  """With TLS the executor takes a free port, in a network of its own where it can
  (netns.py), and the front takes --port; without, the executor takes --port."""
  kwargs = dict(log_dir=FLAGS.log_dir or None, max_concurrent_calls=FLAGS.max_concurrent_calls)
  if not files:
    return WorkerProcess(port=FLAGS.port, **kwargs)
  if netns.available():
    try:
      return WorkerProcess(private_network=True, **kwargs)
    except (OSError, subprocess.SubprocessError) as e:   # e.g. a seccomp filter: as without
      print(f'note: the worker cannot have a network of its own here ({e}).', file=sys.stderr)
  return WorkerProcess(**kwargs)


def serve() -> None:
  try:
    files = tls.TlsFiles.load(FLAGS.tls_ca, FLAGS.tls_cert, FLAGS.tls_key, 'tls_')
  except tls.TlsError as e:
    cli.fail(e)
  stop = []
  signal.signal(signal.SIGINT, lambda *_: stop.append(1))
  signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
  front = None
  if files and port_in_use(FLAGS.port):   # the TLS front's port (without TLS the worker's own)
    cli.fail(PortInUseError(FLAGS.port, '--port'))
  try:
    worker = _start_worker(files)
  except (RuntimeError, ValueError) as e:
    cli.fail(e)
  try:
    if files:
      try:
        front = tls.TlsFront(FLAGS.port, worker.address, files)
      except RuntimeError as e:
        cli.fail(e)
      where = ('in its own network namespace, reached through ' + worker.address
               if worker.bridge else f'on port {worker.port}')
      print(f'TFF worker serving on port {front.port} with mutual TLS (executor pid '
            f'{worker.pid} {where}); log {worker.log_path}', flush=True)
      if not worker.bridge:
        _warn(f'TFF\'s worker_binary has no bind-address option and, without root, cannot get '
              f'a network of its own: its plain port {worker.port} listens on every interface. '
              f'Let only port {front.port} be reached from other hosts (a firewall, or the '
              'NetworkPolicy in deploy/kubernetes.yaml).')
    else:
      print(f'TFF worker serving on port {worker.port} (pid {worker.pid}); log '
            f'{worker.log_path}', flush=True)
      _warn(f'plain gRPC on port {worker.port}, every interface: no authentication and no '
            'encryption; anyone who reaches the port can run TensorFlow code here. Keep it to '
            'localhost, or serve with --tls_ca, --tls_cert and --tls_key (docs/DEPLOY.md, '
            '"Mutual TLS").')
    while not stop:
      if worker.process.poll() is not None:
        cli.fail(f'the worker exited with code {worker.process.returncode}; the end of its log '
                 f'{worker.log_path}: {log_tail(worker.log_path) or "(empty)"}')
      time.sleep(0.2)
  finally:
    if front is not None:
      front.stop()
    worker.stop()
  print('TFF worker stopped.', flush=True)


def main(argv):
  del argv
  if FLAGS.make_certs:
    make_certs()
  else:
    serve()


if __name__ == '__main__':
  cli.run(main)
