r"""Trains and compares several algorithms on the same data, clients and seed.

  python -m programs.compare --config=configs/demo/digits.toml
  python -m programs.compare --config=configs/demo/digits.toml --algorithms=fedavg,fedmeta_maml

Every method gets the same client split, support/query division, initial
model and client sample per round. Prints a Markdown table (one row per
method) and writes comparison.csv, comparison.md and convergence.png to
--output_dir, with each method's own run folder (metrics, checkpoints) below.
"""

import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app, flags  # noqa: E402

from tff_meta.algorithms import ALGORITHMS  # noqa: E402
from tff_meta.program import config as config_lib  # noqa: E402
from tff_meta.program import logs  # noqa: E402
from tff_meta.program import experiment, report  # noqa: E402
from tff_meta.program.errors import USER_ERRORS  # noqa: E402
from tff_meta.runtime.workers import WorkerProcess  # noqa: E402

DEFAULT_METHODS = 'fedavg,fedavg_meta,fedmeta_maml,fedmeta_fomaml,fedmeta_metasgd'
config_lib.define_flags(flags)
flags.adopt_module_key_flags(config_lib)
flags.DEFINE_string('algorithms', DEFAULT_METHODS, 'Comma-separated algorithm names '
                    f'(known: {", ".join(ALGORITHMS.names())}).')
flags.DEFINE_bool('progress', True, 'Show a progress bar per method.')
FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logs.quiet()
  try:
    cfg = config_lib.load(FLAGS.config, config_lib.overrides_from_flags(FLAGS))
    methods = [m.strip() for m in FLAGS.algorithms.split(',') if m.strip()]
    for m in methods:
      ALGORITHMS.get(m)
    cfg = experiment.with_algorithm(cfg, methods[0], cfg.resolved_output_dir()).validate()
    data = experiment.prepare_data(cfg)
    model = experiment.build_model(cfg, data)
  except (*USER_ERRORS, ValueError) as e:
    sys.exit(f'error: {e}')
  print(data.summary())
  print(f'model {cfg.model}: {model.num_parameters:,} parameters; {cfg.rounds} rounds, '
        f'{cfg.clients_per_round} clients per round, support fraction {cfg.support_fraction}')
  out = cfg.resolved_output_dir()
  rows, histories = [], {}
  with WorkerProcess(log_dir=out) as worker:
    for method in methods:
      run_cfg = experiment.with_algorithm(cfg, method, os.path.join(out, method))
      try:
        result = experiment.run(run_cfg, data=data, model=model, worker=worker,
                                show_progress=FLAGS.progress)
      except USER_ERRORS as e:
        sys.exit(f'error: {e}')
      rows.append(result.row())
      histories[result.display_name] = result.history
  table = report.format_table(rows)
  print('\n' + table)
  report.write_csv(rows, os.path.join(out, 'comparison.csv'))
  with open(os.path.join(out, 'comparison.md'), 'w') as f:
    f.write(f'{data.summary()}\n\n{table}\n')
  report.plot_convergence(histories, os.path.join(out, 'convergence.png'),
                          title=f'{cfg.dataset}, {cfg.model}, support {cfg.support_fraction:.0%}')
  print(f'\nWrote {out}/comparison.csv, comparison.md and convergence.png')


if __name__ == '__main__':
  app.run(main)
