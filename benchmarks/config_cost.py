r"""Cost of committed configs: the worker's peak RSS and seconds per training round and per evaluation.

  python -m benchmarks.config_cost --configs=configs/fedmeta/table2_shakespeare_p20_maml.toml \
      --cache_dir=<tff data folder> --max_concurrent_calls=-1,2 --rounds=3

For each config and each --max_concurrent_calls value (the worker's bound on
computation calls run at once; -1 = none), starts one local worker and runs
what `programs.train` runs: the config's data and algorithm, --rounds training
rounds of the clients the training loop samples (seed, rounds 1, 2, ...) on
the default runner, then one evaluation (test, validation and known clients,
as on every `eval_every` round). Prints per setting: the seconds of round 1
(which builds the worker's graphs), the median of the later rounds, the
seconds of the evaluation, the worker's peak RSS (VmHWM) during training and
during the evaluation, and the projected hours of the config's full run
(rounds x round + evaluations x evaluation). A worker that passes
--rss_limit_gb is stopped and its row says so. Not a test: nothing is asserted.
"""

import os
import statistics
import threading

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import app, flags  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from benchmarks import common, processes  # noqa: E402
from tff_meta.classification import config as config_lib  # noqa: E402
from tff_meta.classification import experiment  # noqa: E402
from tff_meta.core import logs
from tff_meta.runtime.execution_plan import ExecutionPlan  # noqa: E402
from tff_meta.classification.round_evaluation import Evaluation  # noqa: E402
from tff_meta.classification.training_loop import RoundSampler  # noqa: E402
from tff_meta.runtime.pool import WorkerPool  # noqa: E402

flags.DEFINE_list('configs', ['configs/fedmeta/table2_shakespeare_p20_maml.toml'],
                  'Experiment configs (TOML), comma-separated.')
flags.DEFINE_string('cache_dir', None, 'Overrides [data].cache_dir (TFF sqlite folder).')
flags.DEFINE_list('max_concurrent_calls', ['config'], 'Worker bounds to compare: integers '
                  '(-1 = no bound) or "config" (the config\'s own max_concurrent_calls).')
flags.DEFINE_integer('rounds', 3, 'Training rounds to time (the first builds the graphs).',
                     lower_bound=1)
flags.DEFINE_integer('clients_per_round', None, 'Overrides the config\'s clients_per_round.')
flags.DEFINE_bool('evaluate', True, 'Also time one evaluation.')
flags.DEFINE_float('rss_limit_gb', 12.0, 'Stop a worker whose RSS passes this.')
FLAGS = flags.FLAGS


class RssWatch:
  """Samples a worker's RSS every `every_s`; kills its process group past `limit_mb`."""

  def __init__(self, worker, limit_mb: float, every_s: float = 0.5):
    self.worker, self.limit_mb, self.every_s = worker, limit_mb, every_s
    self.over = False
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._loop, daemon=True)
    self._thread.start()

  def _loop(self):
    while not self._stop.wait(self.every_s):
      try:
        rss = processes.rss_mb(self.worker.pid)
      except OSError:
        return
      if rss > self.limit_mb:
        self.over = True
        print(f'worker RSS {rss:.0f} MB passed the limit; stopping it.', flush=True)
        self.worker.stop()
        return

  def close(self):
    self._stop.set()
    self._thread.join()


def reset_peak(pid: int) -> None:
  """Resets the process's VmHWM to its current RSS (Linux: clear_refs 5)."""
  with open(f'/proc/{pid}/clear_refs', 'w') as f:
    f.write('5')


def measure(cfg, data, alg, bound: int):
  """A dict of the setting's cells; 'stopped' when the worker passed the limit."""
  sampler = RoundSampler(alg.train_data, data.train, cfg.clients_per_round, cfg.seed,
                         cfg.resample_support, cfg.max_client_examples)
  out = {'clients': sampler.num_clients,
         'examples': sum(len(c.support) + len(c.query) for c in sampler.sample(1).clients)}
  with WorkerPool.local(1, max_concurrent_calls=bound) as pool:
    worker = pool._owned[0]  # pylint: disable=protected-access
    watch = RssWatch(worker, FLAGS.rss_limit_gb * 1024)
    try:
      with tff.framework.get_context_stack().install(pool.context):
        state = alg.process.initialize()
        plan = ExecutionPlan(resident_state=cfg.resident_state, clients_per_call=1)
        runner = plan.runner(alg, pool, num_clients=sampler.num_clients,
                             round_batch=lambda r: sampler.sample(r).batch,
                             needs_state=lambda r: r == FLAGS.rounds)
        reset_peak(worker.pid)
        seconds, cpu = [], []
        with runner:
          for r in range(1, FLAGS.rounds + 1):
            with common.Clock([worker.pid]) as clock:
              state = runner.next(state, r, sampler.sample(r).batch).state
            seconds.append(clock.wall)
            cpu.append(clock.cpu)
            sampler.done(r)
        out.update(first=seconds[0], later=statistics.median(seconds[1:] or seconds),
                   first_cpu=cpu[0], later_cpu=statistics.median(cpu[1:] or cpu),
                   train_peak=processes.peak_rss_mb(worker.pid) / 1024)
        if FLAGS.evaluate:
          reset_peak(worker.pid)
          with common.Clock([worker.pid]) as clock:
            Evaluation(alg, data, pool, cfg.seed).row(state, FLAGS.rounds)
          out.update(evaluation=clock.wall, evaluation_cpu=clock.cpu, eval_peak=processes.peak_rss_mb(worker.pid) / 1024)
    except Exception as e:  # pylint: disable=broad-except
      if not watch.over:
        raise
      out['stopped'] = f'stopped: RSS > {FLAGS.rss_limit_gb:g} GB ({type(e).__name__})'
    finally:
      watch.close()
  return out


def projected_cpu_hours(cfg, cells) -> float:
  """CPU hours of the config's full run: rounds x a later round + evaluations x one."""
  evaluations = cfg.rounds // cfg.eval_every + 1   # round 0 and every eval_every rounds
  return (cfg.rounds * cells['later_cpu'] + evaluations * cells.get('evaluation_cpu', 0.0)) / 3600


def main(argv):
  del argv
  logs.quiet()
  overrides = {'cache_dir': FLAGS.cache_dir, 'clients_per_round': FLAGS.clients_per_round}
  print(f'{common.machine()}; {FLAGS.rounds} training rounds per setting')
  common.table(['config', 'max_concurrent_calls', 'clients/round', 'examples in round 1',
                'round 1 s (CPU s)', 'later rounds s (CPU s)', 'train peak GB',
                'evaluation s (CPU s)', 'eval peak GB', 'full run CPU h'])
  for path in FLAGS.configs:
    cfg = config_lib.load(path, overrides).validate()
    data = experiment.prepare_data(cfg)
    alg = experiment.build_algorithm(cfg, experiment.build_model(cfg, data), data)
    for value in FLAGS.max_concurrent_calls:
      bound = cfg.max_concurrent_calls if value == 'config' else int(value)
      cells = measure(cfg, data, alg, bound)
      name = os.path.basename(path)
      if 'stopped' in cells:
        print(f'| {name} | {bound} | {cells["clients"]} | {cells["stopped"]} |', flush=True)
        continue
      ev = (f'{cells["evaluation"]:.1f} ({cells["evaluation_cpu"]:.1f}) | '
            f'{cells["eval_peak"]:.2f}' if FLAGS.evaluate else '- | -')
      print(f'| {name} | {bound} | {cells["clients"]} | {cells["examples"]} | '
            f'{cells["first"]:.1f} ({cells["first_cpu"]:.1f}) | {cells["later"]:.1f} '
            f'({cells["later_cpu"]:.1f}) | {cells["train_peak"]:.2f} | {ev} | '
            f'{projected_cpu_hours(cfg, cells):.1f}{"" if FLAGS.evaluate else " (training only)"} |',
            flush=True)


if __name__ == '__main__':
  app.run(main)
