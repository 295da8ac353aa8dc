r"""Trains and compares several algorithms on the same data, clients and seed.

  python -m programs.compare --config=configs/demo/digits.toml
  python -m programs.compare --config=configs/demo/digits.toml --algorithms=fedavg,fedmeta_maml

Every method gets the same client split, support/query division, initial
model and client sample per round. With --seeds=K the whole comparison is
repeated for seeds seed..seed+K-1 (new client splits, support/query divisions,
initial weights and client samples) and the table reports the mean, with the
spread of accuracy across runs, as FedMeta Table 2 does. Prints a Markdown table (one row per
method) and writes comparison.csv, comparison.md and convergence.png to
--output_dir, with each method's own run folder (metrics, checkpoints) below.

When FedAvg is among the methods, each other method's row also gives its
accuracy minus FedAvg's per test client, pooled over the seeds, with a 95% CI
(`analysis.groups.paired_difference`, the column `programs.report` prints):
within a seed every method is scored on the same clients and query sets. A
line under the table says how many query points a run scores and what one
example is worth, so that small gaps are read as what they are.
"""

import dataclasses
import os
import sys

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

from tff_meta.algorithms import ALGORITHMS  # noqa: E402
from tff_meta.analysis import figures, groups, tables  # noqa: E402
from tff_meta.core import tables as core_tables  # noqa: E402
from tff_meta.classification import config as config_lib  # noqa: E402
from tff_meta.classification import experiment  # noqa: E402
from tff_meta.program import executor  # noqa: E402
from tff_meta.program import errors, tasks  # noqa: E402
from tff_meta.core import files
from tff_meta.core.run_folder import load_run  # noqa: E402

DEFAULT_METHODS = 'fedavg,fedavg_meta,fedmeta_maml,fedmeta_fomaml,fedmeta_metasgd'
config_lib.define_flags(flags)
flags.adopt_module_key_flags(config_lib)
flags.DEFINE_bool('progress', True, 'Show a progress bar per method.')
flags.DEFINE_integer('seeds', 1, 'Repeat with seeds seed, seed+1, ...; the table shows mean ± std across runs.')
executor.define_flags(flags)
FLAGS = flags.FLAGS


def _mean_row(rows):
  """Mean over seeds; accuracy_std is the sample std across runs (ddof = 1, `tables.seed_std`)."""
  keys = [k for k in rows[0] if k != 'method']
  mean = {'method': rows[0]['method'], **{k: float(np.mean([r[k] for r in rows])) for k in keys}}
  mean['accuracy_std'] = tables.seed_std([r['accuracy'] for r in rows])
  mean['seeds'] = len(rows)
  return mean


def _add_paired(per_method, rows) -> None:
  """Adds `groups.paired_difference` against FedAvg (same seeds, same test clients) to rows."""
  reference = groups.REFERENCE_ALGORITHM
  if reference not in per_method:
    return
  runs = lambda results: [load_run(r.output_dir) for r in results]
  ref = runs(per_method[reference])
  for (method, results), row in zip(per_method.items(), rows):
    if method != reference:
      row.update(groups.paired_difference(runs(results), ref) or {})


def _reading(rows, seeds) -> str:
  """One line on the table's resolution: query points per run, the worth of one example."""
  points = float(np.mean([r['query_examples'] for r in rows]))
  line = (f'Each run scores about {points:.0f} test query points, so one example moves a '
          f'run\'s accuracy by {100 / points:.2f} points.')
  if any('vs_reference' in r for r in rows):
    line += (' "vs FedAvg" pairs each test client with itself under FedAvg, over '
             f'{len(seeds)} seed(s); a CI that includes 0 is no ranking.')
  return line


def _settings(cfg, per_method) -> str:
  """One line: the hparams that differ by method (the config's [method_hparams]), so the
  table is read with the settings it ran; '' when no method has any."""
  parts = [f'{results[0].display_name} ' + ', '.join(
               f'{k} {v}' for k, v in sorted(cfg.method_hparams[method].items()))
           for method, results in per_method.items() if cfg.method_hparams.get(method)]
  if not parts:
    return ''
  return (f'Settings per method (the [method_hparams] of {FLAGS.config}, after any flags; the '
          f'config says how they were chosen): ' + '; '.join(parts) + '.')


def main(argv):
  del argv
  try:
    tasks.require('compare', tasks.task_of_argv(sys.argv[1:]))
    cfg = config_lib.load(FLAGS.config, config_lib.overrides_from_flags(FLAGS))
    # --algorithms is the config key's flag; neither given: FedMeta's five methods.
    names = cfg.algorithms or DEFAULT_METHODS
    methods = [m.strip() for m in names.split(',') if m.strip()]
    for m in methods:
      ALGORITHMS.get(m)
    if FLAGS.seeds < 1:
      raise config_lib.ConfigError(f'--seeds must be >= 1, got {FLAGS.seeds}.')
    cfg = cfg.for_algorithm(methods[0], cfg.resolved_output_dir()).validate()
    out = cfg.resolved_output_dir()
    files.require_folder(out)
    pool = executor.make_pool(FLAGS, log_dir=out, max_concurrent_calls=cfg.max_concurrent_calls)
  except ValueError as e:   # before training, e.g. support_fraction out of (0, 1)
    errors.fail(e)
  seeds = [cfg.seed + i for i in range(FLAGS.seeds)]
  per_method = {m: [] for m in methods}
  with pool:   # user errors from here on end in errors.run
    for seed in seeds:
      seed_cfg = dataclasses.replace(cfg, seed=seed)
      data = experiment.prepare_data(seed_cfg)
      model = experiment.build_model(seed_cfg, data)
      print(f'seed {seed}: {data.summary()}')
      print(f'model {cfg.model}: {model.num_parameters:,} parameters; {cfg.rounds} rounds, '
            f'{cfg.clients_per_round} clients per round, support fraction {cfg.support_fraction}')
      for method in methods:
        run_dir = os.path.join(out, f'seed{seed}' if len(seeds) > 1 else '', method)
        run_cfg = seed_cfg.for_algorithm(method, os.path.normpath(run_dir))
        result = experiment.run(run_cfg, data=data, model=model, pool=pool,
                                show_progress=FLAGS.progress)
        per_method[method].append(result)
  rows = [_mean_row([r.row() for r in results]) for results in per_method.values()]
  _add_paired(per_method, rows)
  histories = {results[0].display_name: figures.mean_history([r.history for r in results])
               for results in per_method.values()}
  table = tables.format_table(rows)
  print(f'\nMean over seeds {seeds}; "±" is the sample std (ddof = 1) of accuracy across those runs.\n' + table)
  reading = '\n'.join(line for line in (_reading(rows, seeds), _settings(cfg, per_method)) if line)
  print('\n' + reading)
  core_tables.write_csv(rows, os.path.join(out, 'comparison.csv'))
  files.write_text(os.path.join(out, 'comparison.md'),
                   f'{cfg.dataset}, model {cfg.model}, {cfg.rounds} rounds, seeds {seeds}\n\n{table}\n\n'
                   f'{reading}\n')
  figures.plot_convergence(histories, os.path.join(out, 'convergence.png'),
                           title=f'{cfg.dataset}, {cfg.model}, support {cfg.support_fraction:.0%}'
                                 f', mean of {len(seeds)} seed(s)')
  print(f'\nWrote {out}/comparison.csv, comparison.md and convergence.png')


if __name__ == '__main__':
  errors.run(main)
