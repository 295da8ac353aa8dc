r"""Times the data pool's gather with the pool placed at SERVER (broadcast) or at CLIENTS.

  python -m benchmarks.pool_placement --cache_dir=<folder of emnist_all.sqlite>
  python -m benchmarks.pool_placement --cache_dir=<folder> --clients=64 --calls=15 \
      --csv=docs/runs/scaling_256/pool_placement.csv

The round data of --clients EMNIST clients (FedMeta episodes, --examples
each) are pooled as `runtime/resident_data.DataPool` pools them (the third
plan of the same round: every array pooled, no fresh rows), and the pool is
created once on a local TFF worker. Each timed call then sends the round's
positions and gathers the group's data on the worker, reduced to one number
so that nothing large comes back:

  server   the pool as a SERVER value, `federated_broadcast` to the clients
           (what the pool did first);
  clients  the pool as an all-equal CLIENTS value (`gather_computation`,
           what it does now).

TFF's worker keeps SERVER and CLIENTS values in separate child executors,
so the broadcast copies the pool at every call. Prints the pool's size and,
per placement, the median [min-max] ms of --calls calls (creating the
positions, the call and the result); --csv writes the rows.
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

import collections  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from absl import app, flags  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from benchmarks import common  # noqa: E402
from tff_meta.runtime import grouped  # noqa: E402
from tff_meta.core import logs  # noqa: E402
from tff_meta.runtime import contexts, fast_values, resident_data  # noqa: E402
from tff_meta.runtime.pool import WorkerPool  # noqa: E402
from tff_meta.runtime.resident import LoopThread  # noqa: E402
from tff_meta.runtime.tls import open_channel  # noqa: E402

common.define_setup_flags(model='mlp', clients=64)
flags.DEFINE_integer('calls', 15, 'Timed calls per placement.')
flags.DEFINE_integer('warmup', 3, 'Untimed calls first.')
flags.DEFINE_string('csv', '', 'Also write the rows to this CSV file.')
FLAGS = flags.FLAGS


def gather_sums(data_spec, placement: str) -> tff.Computation:
  """(<P@placement, {I}@CLIENTS> -> {float32}@CLIENTS): the gathered data, summed."""
  pool_type = tff.types.tensorflow_to_type(resident_data.pool_spec(data_spec))
  group_type = tff.types.tensorflow_to_type(resident_data.positions_spec(data_spec))
  gather = tff.tensorflow.computation(resident_data.gather_group, pool_type, group_type)
  total = tff.tensorflow.computation(
      lambda g: tf.add_n([tf.reduce_sum(tf.cast(x, tf.float32)) for x in tf.nest.flatten(g)]),
      gather.type_signature.result)
  if placement == 'server':
    @tff.federated_computation(tff.FederatedType(pool_type, tff.SERVER),
                               tff.FederatedType(group_type, tff.CLIENTS))
    def sums(pool, groups):
      return tff.federated_map(total, tff.federated_map(
          gather, (tff.federated_broadcast(pool), groups)))
  else:
    @tff.federated_computation(tff.FederatedType(pool_type, tff.CLIENTS, all_equal=True),
                               tff.FederatedType(group_type, tff.CLIENTS))
    def sums(pool, groups):   # pylint: disable=function-redefined
      return tff.federated_map(total, tff.federated_map(gather, (pool, groups)))
  return sums


def main(argv):
  del argv
  logs.quiet()
  ds, model, alg, batch = common.load_round(FLAGS)
  spec = grouped.data_spec(alg.process)
  data_pool = resident_data.DataPool(spec)
  for _ in range(3):   # seen, pooled, then planned from the pool
    upload, positions = data_pool.plan(grouped.split_groups(batch, len(batch)))
    pool = upload if upload is not None else pool
  pool_mb = sum(v.nbytes for v in pool.values()) / 2**20
  fresh = sum(v.nbytes for g in positions for v in g['fresh'].values())
  print(f'{FLAGS.clients} {ds.name} clients x {FLAGS.examples} examples, {FLAGS.algorithm} '
        f'round data: pool {pool_mb:.1f} MB, fresh rows {fresh} bytes; median [min-max] of '
        f'{FLAGS.calls} calls after {FLAGS.warmup}; {common.machine()}')
  header = ['placement', 'pool MB', 'ms per call', 'load average']
  common.table(header)
  rows = []
  with WorkerPool.local(1) as workers:
    channel = open_channel(workers.addresses[0], None)
    executor = contexts.remote_executor(tff.framework.RemoteExecutorGrpcStub(channel))
    executor.set_cardinalities({tff.CLIENTS: 1})
    loop = LoopThread()
    try:
      for placement in ('server', 'clients'):
        comp = gather_sums(spec, placement)
        compiled = tff.backends.native.compiler.desugar_and_transform_to_native(comp)
        fn = loop.run(executor.create_value(compiled, compiled.type_signature))
        pool_type, positions_type = list(comp.type_signature.parameter)
        remote_pool = loop.run(fast_values.create_value(executor, pool, pool_type))

        async def call():
          start = time.perf_counter()
          groups = await fast_values.create_value(executor, positions, positions_type)
          arg = await executor.create_struct(collections.OrderedDict(pool=remote_pool,
                                                                     groups=groups))
          await (await executor.create_call(fn, arg)).compute()
          return time.perf_counter() - start

        times = [loop.run(call()) for _ in range(FLAGS.warmup + FLAGS.calls)][FLAGS.warmup:]
        row = [placement, f'{pool_mb:.1f}', common.fmt([t * 1000 for t in times]),
               f'{os.getloadavg()[0]:.1f}']
        print('| ' + ' | '.join(row) + ' |', flush=True)
        rows.append(row)
        del fn, remote_pool
    finally:
      loop.close()
      executor.close()
      channel.close()
  if FLAGS.csv:
    common.write_csv(FLAGS.csv, header, rows)


if __name__ == '__main__':
  app.run(main)
