"""The recommendation task's `train` command: runs configs and prints the papers' tables.

Chen et al., "Federated Meta-Learning for Recommendation", Table 3 and Fig. 2
(MovieLens-100k), Tables 5-6 (service recommendation). Several configs may be
given (`--config=a.toml,b.toml`); each writes to its output_dir (default
runs/<name>; with several configs, --output_dir=D writes to D/<name>):
config.toml, results.json, table.md, curve.png, and per trained method
checkpoints/, curve.csv and tensorboard/eval/. Rerunning the same command
after a kill resumes from the checkpoints.
"""

import dataclasses
import os
import sys


from absl import flags

from tff_meta.program import executor
from tff_meta.program import errors
from tff_meta.recommendation import config as config_lib
from tff_meta.recommendation import experiment

def define_flags() -> None:
  """Defines this command's flags (absl's global FLAGS)."""
  config_lib.define_flags(flags)
  executor.define_flags(flags, progress=True)


FLAGS = flags.FLAGS


def load_configs(paths, overrides):
  if not paths:
    raise config_lib.ConfigError('--config is required, e.g. '
                                 '--config=configs/recommend/service_p80.toml.')
  cfgs = []
  for path in paths:
    cfg = config_lib.load(path, overrides)
    if len(paths) > 1 and overrides.get('output_dir'):
      cfg = dataclasses.replace(cfg, output_dir=os.path.join(overrides['output_dir'], cfg.name))
    cfgs.append(experiment.validate(cfg))
    experiment.check_folder(cfg)   # before a worker writes its log there
  return cfgs


def main(argv):
  del argv
  try:
    cfgs = load_configs(FLAGS.config, config_lib.overrides_from_flags(FLAGS))
    pool = executor.make_pool(FLAGS, log_dir=cfgs[0].resolved_output_dir())
  except ValueError as e:   # before training, e.g. a value out of range
    errors.fail(e)
  results = []
  with pool:   # user errors from here on end in errors.run
    for cfg in cfgs:
      result = experiment.run(cfg, pool=pool, show_progress=FLAGS.progress)
      print(f'{cfg.name}: {result.data_summary}', file=sys.stderr)
      results.append(result)
  print(experiment.format_results(results))
  print('\nOutputs in ' + ', '.join(r.config.resolved_output_dir() for r in results))
