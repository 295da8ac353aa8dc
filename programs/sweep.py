r"""Grid search for one algorithm, selected on validation clients (never on test).

  python -m programs.sweep --config=configs/demo/digits.toml --algorithm=fedmeta_maml \
      --grid="inner_lr=0.05,0.1,0.3;server_lr=0.001,0.003,0.01"

Runs every combination through the same training loop as programs/train.py
(same data, clients and seed), each in its own folder under --output_dir, and
prints a table of final validation and test accuracy. The best combination by
validation accuracy is marked; put it in the config's [method_hparams] table.
Finished runs are read back, so an interrupted sweep continues.
"""

import dataclasses
import itertools
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import flags  # noqa: E402

from tff_meta.program import config as config_lib  # noqa: E402
from tff_meta.program import executor, experiment, logs  # noqa: E402
from tff_meta.program import errors, files  # noqa: E402

flags.DEFINE_string('config', 'configs/demo/digits.toml', 'TOML experiment config.')
flags.DEFINE_string('algorithm', None, 'Algorithm to tune (default: the config\'s).')
flags.DEFINE_string('grid', None, 'key=v1,v2;key2=v1,v2 over config/hparams keys.', required=True)
flags.DEFINE_string('output_dir', None, 'Folder for the runs (default runs/sweep_<algorithm>).')
flags.DEFINE_integer('rounds', None, 'Override the config\'s rounds.')
executor.define_flags(flags)
FLAGS = flags.FLAGS


def parse_grid(text):
  grid = {}
  for part in filter(None, (p.strip() for p in text.split(';'))):
    key, _, values = part.partition('=')
    if not values:
      raise config_lib.ConfigError(f'--grid entry {part!r} is not key=v1,v2,...')
    grid[key.strip()] = [v.strip() for v in values.split(',') if v.strip()]
  return grid


def main(argv):
  del argv
  logs.quiet()
  try:
    cfg = config_lib.load(FLAGS.config, {'rounds': FLAGS.rounds})
    algorithm = FLAGS.algorithm or cfg.algorithm
    cfg = dataclasses.replace(cfg, method_hparams={})   # the grid decides these values
    grid = parse_grid(FLAGS.grid)
    out = FLAGS.output_dir or os.path.join('runs', f'sweep_{algorithm}')
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    configs = []
    for combo in combos:
      tag = '_'.join(f'{k}={v}' for k, v in combo.items())
      run_cfg = config_lib.apply_overrides(cfg, combo).for_algorithm(
          algorithm, os.path.join(out, tag)).validate()
      configs.append((tag, run_cfg))
    files.require_folder(out)
    data = experiment.prepare_data(configs[0][1])
    model = experiment.build_model(configs[0][1], data)
    pool = executor.make_pool(FLAGS, log_dir=out)
  except ValueError as e:   # before training, e.g. a grid value out of range
    errors.fail(e)
  rows = []
  with pool:   # user errors from here on end in errors.run
    for tag, run_cfg in configs:
      result = experiment.run(run_cfg, data=data, model=model, pool=pool, show_progress=False)
      last = result.history[-1]
      rows.append((tag, 100 * last.get('validation_accuracy', float('nan')),
                   100 * result.test.accuracy))
      print(f'{tag}: validation {rows[-1][1]:.2f}%  test {rows[-1][2]:.2f}%', flush=True)
  best = max(rows, key=lambda r: r[1])
  print(f'\n{algorithm} on {cfg.dataset}, {cfg.rounds} rounds, seed {cfg.seed}; '
        'selected by validation accuracy (*)\n')
  print('| Setting | Validation % | Test % |\n|---|---|---|')
  for tag, val, test in rows:
    print(f'| {tag}{" *" if (tag, val, test) == best else ""} | {val:.2f} | {test:.2f} |')


if __name__ == '__main__':
  errors.run(main)
