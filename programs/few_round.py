r"""Few-round learning (Park et al.): meta-train, then test R rounds of FL on unseen classes.

  python -m programs.few_round --config=configs/fewround/femnist62_5way_iid.toml
  python -m programs.few_round --config=configs/fewround/cifar100_5way_iid.toml --data_path=/data/cifar-100-python
  python -m programs.few_round --config=configs/fewround/femnist62_5way_iid.toml --methods=frl_distance_gpal,fedavg --test_rounds=1,2,3

For every method in --methods (fewround.baselines.METHODS) it runs the
preparing stage (FRL meta-training, or the baselines' pre-training under the
same communication budget), then deploys: R rounds of FL on test episodes of
unseen classes, accuracy mean ± 95% CI over --test_episodes episodes, per
--test_rounds value. Every method sees the same seeded episodes. Outputs in
--output_dir (default runs/<name>): results.json, results.md, config.toml,
and per preparing stage (<method>/ for meta-training, pretrain/ for the
fine-tuning baselines) metrics.csv, tensorboard/ and checkpoints/ (every
--checkpoint_every episodes/rounds). Rerunning the same command resumes
every stage from its last checkpoint (a larger --episodes extends it).
Rounds run on a TFF worker pool (--executor/--workers/--local_workers).
"""

from tff_meta.program import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402

from tff_meta.fewround import baselines  # noqa: E402
from tff_meta.fewround import config as config_lib  # noqa: E402
from tff_meta.fewround import experiment, tasks  # noqa: E402
from tff_meta.program import executor  # noqa: E402
from tff_meta.program import errors, files  # noqa: E402

config_lib.define_flags(flags)
flags.DEFINE_bool('progress', True, 'Show progress bars.')
executor.define_flags(flags)
FLAGS = flags.FLAGS


def main(argv):
  del argv
  try:
    cfg = config_lib.load(FLAGS.config, config_lib.overrides_from_flags(FLAGS))
    for method in cfg.methods:
      baselines.METHODS.get(method)
    cfg = config_lib.with_data_path(cfg, FLAGS.data_path, tasks.path_option(cfg.dataset))
    cfg = config_lib.without_download(cfg, FLAGS.no_download,
                                      tasks.takes_option(cfg.dataset, 'download'))
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


if __name__ == '__main__':
  errors.run(main)
