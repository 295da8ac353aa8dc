r"""Chen et al. 2018b Fig. 3 in one command: MAML against the training users' support fraction.

  python -m research.recommend_fractions --config=configs/recommend/movielens_p80.toml \
      --data_path=/path/to/ml-100k --fractions=0.2,0.4,0.6,0.8 --output_dir=runs/fig3

One MAML run per fraction (the config's settings, `train_support_fraction` = the
fraction) and one run of the bias baseline and NN(pre-trained), which do not
use it, in one worker pool (`research/recommend_fractions/fractions.py`). Writes, in
--output_dir (default runs/<config name>_fractions): fractions.csv, fractions.png
(RMSE and Precision@1 against the fraction, NN(pre-trained) dashed, the bias
baseline dotted; MAML's RMSE curve per fraction) and one run folder per
fraction and for the reference. Rerunning the same command resumes. Every
config key has a flag of the same name that overrides it (docs/CONFIG.md).
"""

import dataclasses
import os

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402

from tff_meta.program import errors  # noqa: E402
from tff_meta.program import executor  # noqa: E402
from tff_meta.recommendation import config as config_lib  # noqa: E402
from research.recommend_fractions import fractions  # noqa: E402

config_lib.define_flags(flags)
flags.DEFINE_list('fractions', ['0.2', '0.4', '0.6', '0.8'],
                  'Training users\' support fractions (Fig. 3: 20% to 80%).')
flags.DEFINE_bool('progress', True, 'Show a progress bar.')
executor.define_flags(flags)
FLAGS = flags.FLAGS


def main(argv):
  del argv
  try:
    if len(FLAGS.config) != 1:
      raise config_lib.ConfigError('--config takes one config here, e.g. '
                                   '--config=configs/recommend/movielens_p80.toml.')
    overrides = config_lib.overrides_from_flags(FLAGS)
    cfg = config_lib.load(FLAGS.config[0], overrides)
    if not overrides.get('output_dir'):
      cfg = dataclasses.replace(cfg, output_dir=os.path.join('runs', f'{cfg.name}_fractions'))
    try:
      values = [float(f) for f in FLAGS.fractions]
    except ValueError:
      raise config_lib.ConfigError(f'--fractions must be numbers in (0, 1), e.g. 0.2,0.4; got '
                                   f'{",".join(FLAGS.fractions)}.') from None
    cfg = fractions.validate(cfg, values)
    pool = executor.make_pool(FLAGS, log_dir=cfg.resolved_output_dir())
  except ValueError as e:   # before training, e.g. a value out of range
    errors.fail(e)
  with pool:
    rows = fractions.run(cfg, values, pool=pool, show_progress=FLAGS.progress)
  print('| training support fraction | MAML RMSE | Precision@1 | Precision@3 | kept episode |')
  print('|---|---|---|---|---|')
  for r in rows:
    print(f'| {r["fraction"]:g} | {r["rmse"]:.4f} | {100 * r["precision@1"]:.2f}% | '
          f'{100 * r["precision@3"]:.2f}% | {r["selected_episode"]} |')
  print(f'\nOutputs in {cfg.resolved_output_dir()} ({fractions.CSV_FILE}, {fractions.PLOT_FILE})')


if __name__ == '__main__':
  errors.run(main)
