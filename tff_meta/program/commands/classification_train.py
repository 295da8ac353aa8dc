"""The classification task's `train` command: one algorithm from a config, under tff.program.

FedMeta's client protocol ("Federated Meta-Learning with Fast Convergence and
Efficient Communication", Sec. 4), FedEC's and the report's: every config
field has an override flag. Outputs go to `output_dir` (default
runs/<name>): metrics.csv, eval.csv, tensorboard/, checkpoints/, config.toml,
results.json. Re-running the same command after a kill resumes from the last
checkpoint.
"""


from absl import flags

from tff_meta.analysis import tables
from tff_meta.classification import config as config_lib
from tff_meta.classification import experiment
from tff_meta.program import executor
from tff_meta.program import errors
from tff_meta.core import files

def define_flags() -> None:
  """Defines this command's flags (absl's global FLAGS)."""
  config_lib.define_flags(flags)
  flags.adopt_module_key_flags(config_lib)
  executor.define_flags(flags, progress=True)


FLAGS = flags.FLAGS


def main(argv):
  del argv
  try:
    cfg = config_lib.load(FLAGS.config, config_lib.overrides_from_flags(FLAGS)).validate()
    files.require_folder(cfg.resolved_output_dir())
    experiment.check_folder(cfg)   # a folder of another run's settings: refused unchanged
  except ValueError as e:   # before training, e.g. support_fraction out of (0, 1)
    errors.fail(e)
  data = experiment.prepare_data(cfg)   # bad data or model options stop here, before any write
  model = experiment.build_model(cfg, data)
  cfg = cfg.for_algorithm(cfg.algorithm, cfg.output_dir)
  alg = experiment.build_algorithm(cfg, model, data)
  # How the rounds execute; the worker's calls at once (and resident state) from its memory
  # budget, for the workers this program starts; remote workers keep theirs.
  plan = experiment.execution(cfg, alg, sized=FLAGS.executor != 'workers')
  with executor.make_pool(FLAGS, log_dir=cfg.resolved_output_dir(),
                          max_concurrent_calls=plan.max_concurrent_calls) as pool:
    result = experiment.run(cfg, data=data, model=model, pool=pool, show_progress=FLAGS.progress,
                            alg=alg, plan=plan)
  print(tables.format_table([result.row()]))
  print(f'\nOutputs in {result.output_dir}')
