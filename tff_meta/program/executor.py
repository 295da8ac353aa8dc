"""Program flags that choose where rounds run, and the pool they build.

  --executor=local  [--local_workers=N]       N project-owned local workers (default 1)
  --executor=workers --workers=h1:p1,h2:p2    running TFF workers (programs/worker.py)
      [--workers_tls_ca=ca.crt --workers_tls_cert=trainer.crt --workers_tls_key=trainer.key]
                                              ... over mutual TLS (runtime/tls.py)
  --client_devices=gpu|0,1|cpu                GPUs for the local workers (CUDA_VISIBLE_DEVICES)

Client work runs inside TFF's C++ `worker_binary`, which uses the devices
visible to its process. `--client_devices` therefore sets CUDA_VISIBLE_DEVICES
for each worker this program starts, spreading the chosen GPUs over
`--local_workers`. Remote workers (`--executor=workers`) use whatever their own
host exposes (set CUDA_VISIBLE_DEVICES there; docs/DEPLOY.md). When TensorFlow
sees no GPU, the flag is ignored with a note.
"""

from __future__ import annotations

import functools
import mmap
import os
import sys
from typing import Callable, Dict, List, Optional

from tff_meta.core.config_file import ConfigError
from tff_meta.runtime import tls
from tff_meta.runtime.pool import WorkerPool, parse_addresses
from tff_meta.runtime.workers import worker_binary_path

EXECUTORS = ('local', 'workers')


def define_flags(flags_module, progress: bool = False) -> None:
  """The executor flags of a training program; with `progress`, also --progress."""
  if progress:
    flags_module.DEFINE_bool('progress', True, 'Show progress bars (off: for logs).')
  flags_module.DEFINE_enum('executor', 'local', list(EXECUTORS),
                           'local: start TFF C++ workers here; workers: use --workers.')
  flags_module.DEFINE_integer('local_workers', 1, 'With --executor=local: how many local '
                              'workers; >1 splits each round\'s clients across them.')
  flags_module.DEFINE_integer('local_worker_port', 0, 'With --executor=local: the first port of '
                              'the local workers (worker i serves on it + i); 0 = free ports '
                              'picked.', lower_bound=0, upper_bound=65535)
  flags_module.DEFINE_string('workers', None, 'With --executor=workers: comma-separated '
                             'host:port of running TFF workers (python -m programs.worker).')
  for name, what in (('ca', 'the CA certificate that signed the workers\' certificates'),
                     ('cert', 'this trainer\'s certificate (signed by that CA)'),
                     ('key', 'this trainer\'s private key')):
    flags_module.DEFINE_string(
        f'workers_tls_{name}', None, f'With --executor=workers: {what}, a PEM file. With all '
        'three --workers_tls_* flags the trainer reaches the workers over mutual TLS '
        '(workers started with python -m programs.worker --tls_ca/--tls_cert/--tls_key).')
  flags_module.DEFINE_string(
      'client_devices', None, 'Devices for client work in the TFF workers this program starts '
      '(--executor=local), set through each worker\'s CUDA_VISIBLE_DEVICES: "gpu" (every GPU '
      'TensorFlow sees, spread over --local_workers), GPU indices such as "0,1", or "cpu" (hide '
      'the GPUs). Unset: workers see what this process sees. Ignored, with a note, when '
      'TensorFlow sees no GPU.')


def _note(message: str) -> None:
  print(f'note: {message}', file=sys.stderr, flush=True)


def visible_gpu_count() -> int:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return len(tf.config.list_physical_devices('GPU'))


@functools.lru_cache(maxsize=None)
def worker_binary_has_gpu_support(path: Optional[str] = None) -> bool:
  """Whether the worker binary contains TensorFlow's GPU device code.

  A CUDA build of TensorFlow links common_runtime/gpu/gpu_device.cc (its log
  messages name the file); a CPU-only build does not. The worker_binary in
  the tensorflow-federated 0.87.0 wheel is a CPU-only build.
  """
  path = path or worker_binary_path()
  with open(path, 'rb') as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
    return data.find(b'common_runtime/gpu/gpu_device.cc') >= 0


def _parse_indices(spec: str) -> List[int]:
  try:
    indices = [int(part) for part in spec.split(',') if part.strip()]
  except ValueError:
    indices = []
  if not indices or any(i < 0 for i in indices) or len(set(indices)) != len(indices):
    raise ConfigError(f'--client_devices={spec!r}: use "gpu", "cpu" or distinct GPU indices '
                     'such as "0,1".')
  return indices


def worker_envs(spec: Optional[str], num_workers: int, *,
                gpu_count: Callable[[], int] = visible_gpu_count,
                has_gpu_support: Callable[[], bool] = worker_binary_has_gpu_support,
                environ: Optional[Dict[str, str]] = None) -> Optional[List[Dict[str, str]]]:
  """The environment of each local worker for `--client_devices=spec`, or None (inherit).

  GPU indices are TensorFlow's (GPU:0, GPU:1, ... of this process). With
  fewer workers than GPUs each worker gets several (worker i: GPUs i, i+n, ...);
  with more, workers share them round-robin.
  """
  environ = os.environ if environ is None else environ
  spec = (spec or '').strip().lower()
  if not spec:
    return None
  if spec == 'cpu':
    return [{'CUDA_VISIBLE_DEVICES': '-1'} for _ in range(num_workers)]
  indices = None if spec == 'gpu' else _parse_indices(spec)
  count = gpu_count()
  if count == 0:
    _note(f'TensorFlow sees no GPU here, so --client_devices={spec} is ignored; client work '
          'runs on the CPU.')
    return None
  if indices is None:
    indices = list(range(count))
  if max(indices) >= count:
    raise ConfigError(f'--client_devices={spec}: TensorFlow sees {count} GPU(s) here, '
                     f'GPU:0 to GPU:{count - 1}.')
  # TensorFlow numbers the GPUs this process sees; CUDA_VISIBLE_DEVICES may already remap them.
  parent = [d.strip() for d in environ.get('CUDA_VISIBLE_DEVICES', '').split(',') if d.strip()]
  cuda_ids = [parent[i] if len(parent) == count else str(i) for i in indices]
  if num_workers <= len(cuda_ids):
    per_worker = [cuda_ids[i::num_workers] for i in range(num_workers)]
  else:
    per_worker = [[cuda_ids[i % len(cuda_ids)]] for i in range(num_workers)]
  # TF_CPP_MIN_LOG_LEVEL=0: the worker log records the devices TensorFlow creates.
  envs = [{'CUDA_VISIBLE_DEVICES': ','.join(ids), 'TF_CPP_MIN_LOG_LEVEL': '0'}
          for ids in per_worker]
  _note('client devices: ' + '; '.join(
      f'worker {i + 1} CUDA_VISIBLE_DEVICES={e["CUDA_VISIBLE_DEVICES"]}' for i, e in enumerate(envs)))
  if not has_gpu_support():
    _note('this TFF worker_binary has no GPU support built in (the tensorflow-federated 0.87.0 '
          'wheel ships a CPU-only build), so client work still runs on the CPU; see '
          'docs/DEPLOY.md, "Devices".')
  return envs


def make_pool(flag_values, log_dir=None, max_concurrent_calls: int = -1) -> WorkerPool:
  """The pool the flags ask for; close it (or use `with`) to stop owned workers.

  `max_concurrent_calls` (the config key): computation calls each local worker
  runs at once (-1 = no bound); remote workers take theirs from
  `programs.worker --max_concurrent_calls`.
  """
  devices = getattr(flag_values, 'client_devices', None)
  if flag_values.executor == 'workers':
    if max_concurrent_calls != -1:
      _note(f'max_concurrent_calls={max_concurrent_calls} applies to workers this program '
            'starts (--executor=local); start remote workers with python -m programs.worker '
            f'--max_concurrent_calls={max_concurrent_calls}.')
    if not flag_values.workers:
      raise ConfigError('--executor=workers needs --workers=host:port[,host:port...].')
    if devices:
      _note('--client_devices applies to workers this program starts (--executor=local); '
            'remote workers use the devices their host exposes (start them with '
            'CUDA_VISIBLE_DEVICES=...; docs/DEPLOY.md).')
    try:
      addresses = parse_addresses(flag_values.workers)
    except ValueError as e:
      raise ConfigError(f'--workers: {e}') from None
    try:
      files = tls.TlsFiles.load(flag_values.workers_tls_ca, flag_values.workers_tls_cert,
                                flag_values.workers_tls_key, 'workers_tls_')
    except tls.TlsError as e:
      raise ConfigError(str(e)) from None
    return WorkerPool(addresses, tls=files)
  if flag_values.workers:
    raise ConfigError('--workers is only used with --executor=workers.')
  tls_flags = [f'--workers_tls_{n}' for n in ('ca', 'cert', 'key')
               if getattr(flag_values, f'workers_tls_{n}', None)]
  if tls_flags:
    raise ConfigError(f'{", ".join(tls_flags)}: only used with --executor=workers (this '
                      'program reaches the workers it starts over loopback).')
  if flag_values.local_workers < 1:
    raise ConfigError(f'--local_workers must be >= 1, got {flag_values.local_workers}.')
  envs = worker_envs(devices, flag_values.local_workers)
  try:
    return WorkerPool.local(flag_values.local_workers, log_dir=log_dir, env=envs,
                            max_concurrent_calls=max_concurrent_calls,
                            first_port=getattr(flag_values, 'local_worker_port', 0) or 0)
  except ValueError as e:   # a bad max_concurrent_calls, before any worker starts
    raise ConfigError(str(e)) from None

