r"""Where a small model's round goes beyond plain TF: the default path's calls to the worker.

  python -m benchmarks.fixed_cost --cache_dir=<folder of emnist_all.sqlite>
  python -m benchmarks.fixed_cost --cache_dir=<folder> --clients_list=4,64 --calls=40

Three measurements on one local TFF worker (environment --worker_env; issue 69, item 3):

1. The round: --algorithm (FedMeta(MAML)) on --model (the demo's MLP) at
   each of --clients_list clients x --examples examples, on the default path,
   against plain TF, calls alternating (`common.time_setting`, which checks
   that both compute the same state). Each of the resident runner's requests
   to the worker (`RemoteExecutor.create_value` / `create_struct` / `create_call` /
   `create_selection`, `RemoteValue.compute`, the data's
   `fast_values.create_value`) and the grouping in Python are timed inside
   the round: ms per round and requests per round.
2. The broadcast: the model's parameters reduced on the clients, given at
   SERVER and broadcast (as the round's state is) or given as an all-equal
   CLIENTS value: the difference is what copying a SERVER broadcast between
   the worker's executors costs for this model.
3. The floor: one request (`create_value` of a scalar), and calls of k
   chained trivial TF computations at SERVER (k = 1, 4, 8: each computation's
   own cost on the worker).

--pool_min_clients sets the plan's `POOL_MIN_CLIENTS` for part 1 (the data pool at fewer
clients, to measure what it would save); --noworker_parts runs part 1 only.

Medians [min-max] of --calls calls after a few untimed ones; the load average
is printed with each part (the machine may be shared: report it).
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

import collections  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_federated as tff  # noqa: E402
# Not exported under tff.framework in TFF 0.87.
from tensorflow_federated.python.core.impl.executors import remote_executor  # noqa: E402

from benchmarks import common  # noqa: E402
from tff_meta.core import logs  # noqa: E402
from tff_meta.data import client_data  # noqa: E402
from tff_meta.runtime import (contexts, execution_plan, fast_values, grouped_rounds,  # noqa: E402
                              resident)
from tff_meta.runtime.pool import WorkerPool  # noqa: E402
from tff_meta.runtime.workers import close_channel  # noqa: E402

common.define_setup_flags(model='mlp')   # --clients_list, not --clients
flags.DEFINE_list('clients_list', ['4', '64'], 'Clients per round of part 1.')
flags.DEFINE_integer('calls', 40, 'Timed calls per measurement.')
flags.DEFINE_integer('pool_min_clients', -1, 'Clients per call from which the resident data pool '
                     'is used (execution_plan.POOL_MIN_CLIENTS; -1 = the plan\'s own).')
flags.DEFINE_bool('worker_parts', True, 'Also run parts 2 and 3 (the broadcast, the floor).')
FLAGS = flags.FLAGS

WARMUP = 5
# The requests timed in part 1: (owner, method, async).
TIMED = ((remote_executor.RemoteExecutor, 'create_value', True),
         (remote_executor.RemoteExecutor, 'create_struct', True),
         (remote_executor.RemoteExecutor, 'create_call', True),
         (remote_executor.RemoteExecutor, 'create_selection', True),
         (remote_executor.RemoteValue, 'compute', True),
         (fast_values, 'create_value', True),
         (grouped_rounds.GroupedRounds, 'groups', False))


class Requests:
  """Wall seconds and counts of the `TIMED` methods while installed (`with`)."""

  def __init__(self):
    self.seconds, self.count = collections.Counter(), collections.Counter()
    self._saved = []

  def _timed(self, owner, name, is_async):
    f = getattr(owner, name)
    key = f'{getattr(owner, "__name__", "")}.{name}'

    async def timed_async(*args, **kwargs):
      t = time.perf_counter()
      try:
        return await f(*args, **kwargs)
      finally:
        self.seconds[key] += time.perf_counter() - t
        self.count[key] += 1

    def timed(*args, **kwargs):
      t = time.perf_counter()
      try:
        return f(*args, **kwargs)
      finally:
        self.seconds[key] += time.perf_counter() - t
        self.count[key] += 1
    return f, timed_async if is_async else timed

  def __enter__(self):   # entered around each timed call; counts accumulate
    self._saved = []
    for owner, name, is_async in TIMED:
      original, timed = self._timed(owner, name, is_async)
      self._saved.append((owner, name, original))
      setattr(owner, name, timed)
    return self

  def __exit__(self, *exc):
    for owner, name, original in self._saved:
      setattr(owner, name, original)


def _ms(xs) -> str:
  """`common.fmt` of seconds, in ms."""
  return common.fmt([1e3 * x for x in xs])


def _load() -> str:
  return f'load average {os.getloadavg()[0]:.1f}'


def round_part(alg, clients, pool) -> None:
  """Part 1: the default path's round, its requests, against plain TF (`common.time_setting`,
  which also checks that both compute the same state)."""
  for n in (int(c) for c in FLAGS.clients_list):
    batch = client_data.round_data(alg.train_data, clients[:n], 0, 1)
    requests = Requests()
    times, _ = common.time_setting(alg, batch, 'default', pool, FLAGS.calls, WARMUP,
                                   watch=requests)
    tff_s, ref_s = times['tff']['wall'], times['ref']['wall']
    extra = statistics.median(tff_s) - statistics.median(ref_s)
    print(f'\n{n} clients: TFF {_ms(tff_s)} ms, plain TF {_ms(ref_s)} ms a round; TFF - plain '
          f'TF = {1e3 * extra:.2f} ms ({_load()})')
    common.table(['inside the TFF round', 'ms per round (mean)', 'per round'])
    for key, seconds in requests.seconds.items():
      print(f'| {key} | {1e3 * seconds / FLAGS.calls:.2f} | '
            f'{requests.count[key] / FLAGS.calls:g} |')


def _timed_calls(loop, executor, fn, value) -> list:
  """Wall seconds of `fn(value)` (create_call + compute) on the worker, `--calls` times."""
  compiled = tff.backends.native.compiler.desugar_and_transform_to_native(fn)

  async def setup():
    return (await executor.create_value(compiled, compiled.type_signature),
            await executor.create_value(value, fn.type_signature.parameter))

  async def call(f, v):
    return await (await executor.create_call(f, v)).compute()
  f, v = loop.run(setup())
  seconds = []
  for _ in range(WARMUP + FLAGS.calls):
    t = time.perf_counter()
    loop.run(call(f, v))
    seconds.append(time.perf_counter() - t)
  return seconds[WARMUP:]


def worker_parts(alg, pool) -> None:
  """Parts 2 and 3: the broadcast of the model's parameters; a request; chained computations."""
  with tff.framework.get_context_stack().install(pool.context):
    params = alg.process.initialize()['params']
  params_type = alg.process.next.type_signature.parameter[0].member['params']

  @tff.tensorflow.computation(params_type)
  def reduce(p):
    return tf.add_n([tf.reduce_sum(x) for x in tf.nest.flatten(p)])

  @tff.federated_computation(tff.FederatedType(params_type, tff.SERVER))
  def broadcast(p):
    return tff.federated_sum(tff.federated_map(reduce, tff.federated_broadcast(p)))

  @tff.federated_computation(tff.FederatedType(params_type, tff.CLIENTS, all_equal=True))
  def at_clients(p):
    return tff.federated_sum(tff.federated_map(reduce, p))

  @tff.tensorflow.computation(np.float32)
  def increment(x):
    return x + 1.0

  def chain(k):
    @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER))
    def chained(x):
      for _ in range(k):
        x = tff.federated_map(increment, x)
      return x
    return chained

  channel = resident.open_channel(pool.addresses[0], None)
  executor = contexts.remote_executor(tff.framework.RemoteExecutorGrpcStub(channel))
  executor.set_cardinalities({tff.CLIENTS: 1})
  loop = resident.LoopThread()
  try:
    size = sum(np.size(p) for p in tf.nest.flatten(params))
    print(f'\nThe worker ({_load()}); the model\'s parameters: {size:,} floats, '
          f'{4 * size / 1e6:.2f} MB')
    common.table(['call (create_call + compute)', 'ms'])
    rows = [('parameters at SERVER, broadcast, reduced on the clients', broadcast, params),
            ('parameters at CLIENTS (all-equal), reduced on the clients', at_clients, params),
            *[(f'{k} chained trivial TF computation(s) at SERVER', chain(k), np.float32(0))
              for k in (1, 4, 8)]]
    for label, fn, value in rows:
      print(f'| {label} | {_ms(_timed_calls(loop, executor, fn, value))} |', flush=True)

    async def one_request():
      return await executor.create_value(np.float32(1.0), tff.TensorType(np.float32))
    seconds = []
    for _ in range(FLAGS.calls * 5):
      t = time.perf_counter()
      loop.run(one_request())
      seconds.append(time.perf_counter() - t)
    print(f'| one request (create_value of a scalar) | {_ms(seconds)} |')
  finally:
    executor.close()
    loop.close()
    close_channel(channel)


def main(argv):
  del argv
  logs.quiet()
  env = common.worker_env(FLAGS.worker_env)
  counts = [int(c) for c in FLAGS.clients_list]
  ds, clients, model = common.load_setup(FLAGS, max(counts))
  alg = common.build_algorithm(FLAGS.algorithm, model)
  print(f'{FLAGS.model} ({model.num_parameters:,} parameters), {alg.display_name}, '
        f'{FLAGS.examples} examples per client; {common.machine()}')
  if FLAGS.pool_min_clients >= 0:
    execution_plan.POOL_MIN_CLIENTS = FLAGS.pool_min_clients
  print(f'resident data pool from {execution_plan.POOL_MIN_CLIENTS} clients per call')
  with WorkerPool.local(1, env=env) as pool:
    round_part(alg, clients, pool)
    if FLAGS.worker_parts:
      worker_parts(alg, pool)


if __name__ == '__main__':
  app.run(main)
