"""Shared pieces of the speed benchmarks: real clients, the plain-TF
reference round, clocks and summaries. Not a test; nothing here asserts speed.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

import tensorflow_federated as tff

from benchmarks import processes
from tff_meta.algorithms import ALGORITHMS, Hparams
from tff_meta.algorithms import process as process_lib
from tff_meta.core.tables import markdown_table
from tff_meta.data import load_dataset, protocol
from tff_meta.classification.config import ExperimentConfig
from tff_meta.runtime.execution_plan import ExecutionPlan
from tff_meta.runtime.resident import ResidentRounds
from tff_meta.runtime.rounds import PlainRounds

# TFF and plain TF must agree after the first call to this relative tolerance.
TOLERANCE = 1e-4

# The FEMNIST Table 4 rates, with server Adam (FedMeta Appendix A.2).
HPARAMS = Hparams(inner_lr=0.001, server_lr=1e-4, client_lr=1e-4)

# Keep loading small: enough clients with --examples examples each.
_LOAD_OPTIONS = {'emnist': {'max_clients': 200}, 'shakespeare': {'max_clients': 100, 'stride': 10}}


def define_setup_flags(model: str, clients: Optional[int] = None,
                       algorithm: str = 'fedmeta_maml') -> None:
  """The flags every benchmark shares: model, algorithm, dataset, cache_dir, clients (unless
  `clients` is None: a benchmark of several counts), examples."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string('model', model, 'Model registry name.')
  flags.DEFINE_string('algorithm', algorithm, 'Algorithm registry name.')
  flags.DEFINE_string('dataset', 'emnist', 'Dataset registry name (emnist, shakespeare, digits).')
  flags.DEFINE_string('cache_dir', os.path.expanduser('~/.tff'),
                      'TFF sqlite folder (emnist, shakespeare).')
  if clients is not None:
    flags.DEFINE_integer('clients', clients, 'Clients per round.')
  flags.DEFINE_integer('examples', 100, 'Examples per client (support 20%, query 80%).')
  flags.DEFINE_list('worker_env', [], 'KEY=VALUE environment of every TFF worker, e.g. '
                    'MALLOC_ARENA_MAX=2, or TF_NUM_INTRAOP_THREADS=1,TF_NUM_INTEROP_THREADS=1 '
                    '(one core per worker).')


def worker_env(values) -> dict:
  """--worker_env's KEY=VALUE items as a mapping (None when empty); one `error:` line and
  exit 1 for an item without `=`."""
  bad = [kv for kv in values if '=' not in kv]
  if bad:
    sys.exit(f'error: --worker_env items are KEY=VALUE (e.g. MALLOC_ARENA_MAX=2), got {bad}.')
  return dict(kv.split('=', 1) for kv in values) or None


def load_clients(dataset: str, cache_dir: str, num_clients: int, examples: int):
  """`num_clients` real clients with `examples` examples each (support 20%, query 80%).

  Clients are reused cyclically when fewer qualify (their data are identical
  then, which does not change the cost of a round).
  """
  options = dict(_LOAD_OPTIONS.get(dataset, {}))
  if dataset in ('emnist', 'shakespeare'):
    options['cache_dir'] = cache_dir
  ds = load_dataset(dataset, **options)
  big = sorted(k for k, v in ds.clients.items() if len(v) >= examples)
  if not big:
    sys.exit(f'error: no {dataset} client has {examples} examples; lower --examples.')
  splits = [protocol.support_query_split(ds.clients[k].take(np.arange(examples)), 0.2, 0, k)
            for k in big[:num_clients]]
  return ds, [splits[i % len(splits)] for i in range(num_clients)]


def load_setup(flag_values, num_clients: int):
  """(dataset, `num_clients` clients, model) from the shared --dataset/--cache_dir/
  --examples/--model flags: the setup every benchmark starts from."""
  from tff_meta.models import build_model_spec  # pylint: disable=g-import-not-at-top
  ds, clients = load_clients(flag_values.dataset, flag_values.cache_dir, num_clients,
                             flag_values.examples)
  model = build_model_spec(flag_values.model, ds.element_shape, ds.num_classes,
                           x_dtype=ds.x_dtype)
  return ds, clients, model


def build_algorithm(name: str, model, hparams: Hparams = HPARAMS):
  return ALGORITHMS.get(name)(model, hparams)


def load_round(flag_values):
  """(dataset, model, algorithm, one round's client data) from the shared flags:
  `load_setup` with --clients clients, --algorithm, round 1's data."""
  from tff_meta.data import client_data  # pylint: disable=g-import-not-at-top
  ds, clients, model = load_setup(flag_values, flag_values.clients)
  alg = build_algorithm(flag_values.algorithm, model)
  return ds, model, alg, client_data.round_data(alg.train_data, clients, 0, 1)


def plain_tf_round(proc, initial_state, batch):
  """One `tf.compat.v1` graph running the *same* round pieces as the TFF process
  (`proc.client_work`, `server_update_fn`), state in variables.

  Returns (step(round_batch=batch): runs one round on `round_batch`, which has `batch`'s
  clients and keys, any number of examples each; read(): the state, close()).
  """
  graph = tf.Graph()
  with graph.as_default():
    state_vars = tf.nest.map_structure(tf.Variable, initial_state)
    feeds = [tf.nest.map_structure(
        lambda a: tf.compat.v1.placeholder(a.dtype, [None, *a.shape[1:]]), dict(c))
             for c in batch]
    state = tf.nest.map_structure(lambda v: v.read_value(), state_vars)
    outs = [proc.client_work(state['params'], f) for f in feeds]
    total = tf.nest.map_structure(lambda *xs: tf.add_n(list(xs)), *outs)
    new_state = process_lib.server_update_fn(proc.server_optimizer, state, total)
    step = tf.group(*[v.assign(n) for v, n in zip(tf.nest.flatten(state_vars),
                                                    tf.nest.flatten(new_state))])
    init = tf.compat.v1.global_variables_initializer()
  session = tf.compat.v1.Session(graph=graph)
  session.run(init)
  feed_of = lambda b: {p: a for f, c in zip(feeds, b)
                      for p, a in zip(tf.nest.flatten(f), tf.nest.flatten(dict(c)))}
  feed = feed_of(batch)
  run = lambda round_batch=None: session.run(
      step, feed if round_batch is None else feed_of(round_batch))
  return run, lambda: session.run(state_vars), session.close


def tff_rounds(alg, batch, mode, pool, num_calls):
  """(rounds per call, run(state, call) -> state after the call, close()) for `mode`.

  `default` is the path `programs.train` takes with no flag: the runner the
  training loop's own `ExecutionPlan` builds with the config defaults
  (`resident_state`, `clients_per_call`); `resident` is
  `ResidentRounds` (one client per call); `grouped` the resident path with all
  the round's clients in one call per worker, `groupedK` with groups of at
  most K clients (`runtime/grouped_rounds.py`); `plain` is `PlainRounds`. The state is fetched after the first call
  (the check) and the last.
  """
  needs_state = lambda r: r in (1, num_calls)
  if mode in ('default', 'resident') or mode.startswith('grouped'):
    if mode == 'default' or mode.startswith('grouped'):
      defaults = ExperimentConfig()
      per_call = (defaults.clients_per_call if mode == 'default'
                  else int(mode[len('grouped'):] or -(-len(batch) // len(pool.addresses))))
      plan = ExecutionPlan(resident_state=defaults.resident_state, clients_per_call=per_call)
      runner = plan.runner(alg, pool, num_clients=len(batch), round_batch=lambda r: batch,
                           needs_state=needs_state)
    else:
      runner = ResidentRounds(alg.process, pool.addresses[0], len(batch), needs_state)
    return 1, lambda state, call: runner.next(state, call + 1, batch).state, runner.close
  if mode != 'plain':
    raise ValueError(f'unknown mode {mode!r}: default, resident, plain, grouped or groupedK.')
  runner = PlainRounds(alg.process)
  return 1, lambda state, call: runner.next(state, call + 1, batch).state, runner.close


def time_setting(alg, batch, mode, pool, calls, warmup, watch=None):
  """Returns dicts of per-round wall/cpu lists for 'tff' and 'ref', and the state check.

  `warmup` untimed calls, then `calls` timed ones, TFF and plain TF alternating; after the
  first call both states must agree to `TOLERANCE`. `watch`, a context manager that can be
  entered again and again (`fixed_cost.Requests`), is entered around each timed TFF call,
  outside its clock.
  """
  with tff.framework.get_context_stack().install(pool.context):
    initial = state = alg.process.initialize()
  step, read, close = plain_tf_round(alg.process, initial, batch)
  k, tff_call, tff_close = tff_rounds(alg, batch, mode, pool, warmup + calls)
  clock = Clock(worker_pids(pool))
  times = {'tff': {'wall': [], 'cpu': []}, 'ref': {'wall': [], 'cpu': []}}
  check = None
  try:
    for call in range(warmup + calls):
      watched = watch if watch is not None and call >= warmup else contextlib.nullcontext()
      with watched, tff.framework.get_context_stack().install(pool.context), clock:
        state = tff_call(state, call)
      tff_t = (clock.wall / k, clock.cpu / k)
      with Clock() as ref_clock:
        for _ in range(k):
          step()
      if call == 0:
        check = relative_difference(state, read(), initial)
        assert check < TOLERANCE, (
            f'{alg.display_name}, mode {mode}: TFF and plain TF differ after {k} '
            f'round(s) (relative {check:.2e})')
      if call >= warmup:
        for side, (wall, cpu) in (('tff', tff_t), ('ref', (ref_clock.wall / k, ref_clock.cpu / k))):
          times[side]['wall'].append(wall)
          times[side]['cpu'].append(cpu)
  finally:
    close()
    tff_close()
  return times, check


def relative_difference(a, b, initial) -> float:
  """|params(a) - params(b)| / |params(b) - params(initial)|: 0 = same state."""
  flat = lambda s: np.concatenate([np.ravel(x) for x in tf.nest.flatten(s['params'])])
  return float(np.linalg.norm(flat(a) - flat(b)) /
               max(np.linalg.norm(flat(b) - flat(initial)), 1e-12))


class Clock:
  """Wall seconds and CPU seconds of the given worker PIDs (plus this process's)."""

  def __init__(self, pids: Sequence[int] = (), include_self: bool = True):
    self.pids = list(pids)
    self.include_self = include_self

  def _cpu(self) -> float:
    own = time.process_time() if self.include_self else 0.0
    return own + sum(processes.cpu_seconds(p) for p in self.pids)

  def __enter__(self):
    self._t0, self._c0 = time.perf_counter(), self._cpu()
    return self

  def __exit__(self, *exc):
    self.wall = time.perf_counter() - self._t0
    self.cpu = self._cpu() - self._c0


def worker_pids(pool) -> List[int]:
  """PIDs of the local workers a `WorkerPool.local` started."""
  return [w.pid for w in pool._owned]  # pylint: disable=protected-access


def summary(xs: Sequence[float]) -> Dict[str, float]:
  return {'median': statistics.median(xs), 'min': min(xs), 'max': max(xs)}


def fmt(xs: Sequence[float]) -> str:
  s = summary(xs)
  return f'{s["median"]:.3f} [{s["min"]:.3f}-{s["max"]:.3f}]'


TIMING_HEADER = ['TFF s/round', 'plain TF s/round', 'ratio', 'TFF CPU s/round',
                 'plain TF CPU s/round', 'CPU ratio']


def timing_cells(times) -> List[str]:
  """Table cells for {'tff'|'ref': {'wall'|'cpu': [seconds per round]}} (TIMING_HEADER)."""
  med = lambda side, what: summary(times[side][what])['median']
  return [fmt(times['tff']['wall']), fmt(times['ref']['wall']),
          f'{med("tff", "wall") / med("ref", "wall"):.2f}', f'{med("tff", "cpu"):.3f}',
          f'{med("ref", "cpu"):.3f}', f'{med("tff", "cpu") / med("ref", "cpu"):.2f}']


def machine() -> str:
  with open('/proc/meminfo') as f:
    mem_kb = float(f.readline().split()[1])
  load = os.getloadavg()[0]
  return (f'{os.cpu_count()} cores, {mem_kb / 2**20:.0f} GiB memory, load average '
          f'{load:.1f} at start{" (other jobs running)" if load > 0.5 else ""}')


def write_csv(path: str, header: List[str], rows: List[List[str]]) -> None:
  """The rows measured so far, written atomically."""
  import csv  # pylint: disable=g-import-not-at-top
  from tff_meta.core import files  # pylint: disable=g-import-not-at-top
  with files.atomic_open(path, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerows(rows)


def table(header: List[str]) -> None:
  print(markdown_table(header, []), flush=True)   # the rows follow as they are measured
