"""Few-round learning's `train` command: meta-train, then test R rounds of FL on unseen classes.

Park et al., "Few-Round Learning for Federated Learning". For every method in
the config's `methods` (`fewround.baselines.METHODS`) it runs the preparing
stage (FRL meta-training, or the baselines' pre-training under the same
communication budget), then deploys: R rounds of FL on test episodes of unseen
classes, accuracy mean ± 95% CI per `test_rounds` value. Every method sees
the same seeded episodes. Outputs in `output_dir`: results.json, results.md,
config.toml, and per preparing stage metrics.csv, tensorboard/ and
checkpoints/. Rerunning the same command resumes every stage.
"""


from absl import flags

from tff_meta.fewround import baselines
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import experiment, tasks
from tff_meta.program import executor
from tff_meta.program import errors
from tff_meta.core import files

def define_flags() -> None:
  """Defines this command's flags (absl's global FLAGS)."""
  config_lib.define_flags(flags)
  executor.define_flags(flags, progress=True)


FLAGS = flags.FLAGS


def load_config():
  """The config of the command line: --config with every flag's override, its methods known,
  --data_path and --no_download applied to its data source (not yet validated)."""
  cfg = config_lib.load(FLAGS.config, config_lib.overrides_from_flags(FLAGS))
  for method in cfg.methods:
    baselines.METHODS.get(method)
  cfg = config_lib.with_data_path(cfg, FLAGS.data_path, tasks.path_option(cfg.dataset))
  return config_lib.without_download(cfg, FLAGS.no_download,
                                     tasks.takes_option(cfg.dataset, 'download'))


def main(argv):
  del argv
  try:
    cfg = load_config()
    cfg.validate()
    out = cfg.resolved_output_dir()
    files.require_folder(out)
    data = experiment.load_data(cfg)
  except ValueError as e:   # before anything is written, e.g. a value out of range
    errors.fail(e)
  experiment.prepare_output(cfg, out)   # another config's checkpoints: a one-line error
  with executor.make_pool(FLAGS, log_dir=out) as pool:   # user errors end in errors.run
    rows = experiment.run(cfg, data, pool, FLAGS.progress, out)
  print(experiment.write(cfg, out, rows))
  print(f'\nOutputs in {out}')
