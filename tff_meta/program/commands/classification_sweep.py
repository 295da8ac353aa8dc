"""The classification task's `sweep` command: a grid for one algorithm, selected on validation clients.

Runs every combination through the same training loop as `train` (same data,
clients and seed), each in its own folder under --output_dir, and prints a
table of final validation and test accuracy. With --seeds=0,1,2 every
combination runs once per seed and the selection uses the mean validation
accuracy. The test column is printed for the record; it never selects.
"""

import dataclasses
import itertools
import os


import numpy as np
from absl import flags

from tff_meta.analysis.tables import seed_std
from tff_meta.core import tables
from tff_meta.classification import config as config_lib
from tff_meta.classification import experiment
from tff_meta.program import executor
from tff_meta.program import errors
from tff_meta.core import files

def define_flags() -> None:
  """Defines this command's flags (absl's global FLAGS)."""
  flags.DEFINE_string('config', 'configs/demo/digits.toml', 'TOML experiment config.')
  flags.DEFINE_string('algorithm', None, 'Algorithm to tune (default: the config\'s).')
  flags.DEFINE_multi_string('grid', None, 'KEY=V1,V2,... over config/hparams keys; repeat the '
                            'flag (or join entries with ";") for more keys.', required=True)
  flags.DEFINE_string('output_dir', None, 'Folder for the runs (default runs/sweep_<algorithm>).')
  flags.DEFINE_integer('rounds', None, 'Override the config\'s rounds.')
  flags.DEFINE_list('seeds', None, 'Seeds to average the selection over (default: the config\'s seed); '
                    'seed s runs in <setting>/seed<s>.')
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
  try:
    cfg = config_lib.load(FLAGS.config, {'rounds': FLAGS.rounds})
    algorithm = FLAGS.algorithm or cfg.algorithm
    cfg = dataclasses.replace(cfg, method_hparams={})   # the grid decides these values
    grid = parse_grid(';'.join(FLAGS.grid))
    out = FLAGS.output_dir or os.path.join('runs', f'sweep_{algorithm}')
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    try:
      seeds = [int(x) for x in FLAGS.seeds] if FLAGS.seeds else [cfg.seed]
    except ValueError:
      raise config_lib.ConfigError(f'--seeds must be integers >= 0, e.g. --seeds=0,1,2; got '
                                   f'{",".join(FLAGS.seeds)!r}') from None
    if min(seeds) < 0:
      raise config_lib.ConfigError(f'--seeds must be integers >= 0, got {min(seeds)}.')
    configs = []
    for combo in combos:
      tag = '_'.join(f'{k}={v}' for k, v in combo.items())
      for seed in seeds:
        folder = os.path.join(out, tag, f'seed{seed}') if FLAGS.seeds else os.path.join(out, tag)
        run_cfg = config_lib.apply_overrides(cfg, dict(combo, seed=seed)).for_algorithm(
            algorithm, folder).validate()
        configs.append((tag, seed, run_cfg))
    files.require_folder(out)
    prepared = {}   # seed -> (data, model): the client split depends on the seed

    def data_and_model(run_cfg):
      if run_cfg.seed not in prepared:
        split = experiment.prepare_data(run_cfg)
        prepared[run_cfg.seed] = (split, experiment.build_model(run_cfg, split))
      return prepared[run_cfg.seed]

    data_and_model(configs[0][2])   # bad data or model options fail before any training
    pool = executor.make_pool(FLAGS, log_dir=out, max_concurrent_calls=cfg.max_concurrent_calls)
  except ValueError as e:   # before training, e.g. a grid value out of range
    errors.fail(e)
  scores = {}   # tag -> [(validation %, test %) per seed]
  with pool:   # user errors from here on end in errors.run
    for tag, seed, run_cfg in configs:
      data, model = data_and_model(run_cfg)
      result = experiment.run(run_cfg, data=data, model=model, pool=pool, show_progress=False)
      last = result.history[-1]
      val, test = 100 * last.get('validation_accuracy', float('nan')), 100 * result.test.accuracy
      scores.setdefault(tag, []).append((val, test))
      print(f'{tag} seed {seed}: validation {val:.2f}%  test {test:.2f}%', flush=True)
  rows = [(tag, np.mean([v for v, _ in s]), seed_std([v for v, _ in s]),
           np.mean([t for _, t in s]), seed_std([t for _, t in s]))
          for tag, s in scores.items()]
  best = max(rows, key=lambda r: r[1])[0]
  print(f'\n{algorithm} on {cfg.dataset}, {cfg.rounds} rounds, seeds {",".join(map(str, seeds))}; '
        'selected by mean validation accuracy (*)\n')
  pm = (lambda m, sd: f'{m:.2f} ± {sd:.2f}') if len(seeds) > 1 else (lambda m, sd: f'{m:.2f}')
  print(tables.markdown_table(
      ['Setting', 'Validation %', 'Test %'],
      [[f'{tag}{" *" if tag == best else ""}', pm(val, val_std), pm(test, test_std)]
       for tag, val, val_std, test, test_std in rows]))
