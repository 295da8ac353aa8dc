r"""Writes a generated ml-100k-shaped folder (NOT MovieLens data) for development.

  python -m research.movielens_synth --output_dir=/tmp/ml-100k-generated --seed=0
  # then: python -m programs.train --config=<movielens config> \
  #     --data_path=/tmp/ml-100k-generated

The folder holds u.data, u.user, u.item, u.occupation in GroupLens' formats
with ml-100k's public statistics (943 users, 1,682 items, 100,000 ratings,
its star histogram; `research.movielens_synth.synth`), and a README saying it
is generated. The same seed writes the same files. A folder that already
holds a u.data not written by this program is left alone (error).

With --stats it then prints the folder's baseline statistics beside real
ml-100k's (issue #15; `research.movielens_synth.calibration`): the bias
baseline's and item-bias-only RMSE and the item-mean ranking's Precision@k,
with chronological and random query sets; for the written folder also the
oracle's (`oracle_*`: predicting each rating's expected stars, which the
generator knows, on the same query sets; the most the generated data allows).
The surprise rows (`surprise_*`) measure the latent-factor structure beyond biases (a 5-fold
BaselineOnly and SVD, beside their published ml-100k values).
--stats_of=<folder> prints them for an existing folder (e.g. your real
ml-100k) without writing anything (no oracle: only the generator knows it).
"""

import os
import sys

from absl import flags

from research.movielens_synth import synth as movielens_synth
from tff_meta.data.movielens import load_movielens
from tff_meta.data.types import DataError
from tff_meta.core import cli
from research.movielens_synth import calibration

flags.DEFINE_string('output_dir', '', 'Folder to write (created if missing).')
flags.DEFINE_integer('seed', 0, 'Seed of the generator.')
flags.DEFINE_bool('stats', False, 'Print the written folder\'s calibration statistics and the '
                  'oracle\'s (expected ratings) on the same query sets.')
flags.DEFINE_string('stats_of', '', 'Only print the calibration statistics of this existing '
                    'ml-100k-shaped folder (nothing is written).')
FLAGS = flags.FLAGS


def check_folder(folder: str) -> None:
  if not folder:
    raise DataError('--output_dir is required, e.g. --output_dir=/tmp/ml-100k-generated.')
  if os.path.exists(folder) and not os.path.isdir(folder):
    raise DataError(f'--output_dir={folder} is a file; name a folder.')
  readme = os.path.join(folder, 'README')
  generated = os.path.isfile(readme) and open(readme, encoding='latin-1').read().startswith(
      movielens_synth.README_START)
  if os.path.isfile(os.path.join(folder, 'u.data')) and not generated:
    raise DataError(f'{folder} already holds a u.data this program did not write (real '
                      'MovieLens data?); choose an empty folder.')


def main(argv):
  del argv
  try:
    if FLAGS.stats_of:
      ds = load_movielens(FLAGS.stats_of)
      print(calibration.format_statistics({**calibration.statistics(ds),
                                           **calibration.factor_statistics(ds)}))
      return
    check_folder(FLAGS.output_dir)
    movielens_synth.write(FLAGS.output_dir, seed=FLAGS.seed)
    if FLAGS.stats:
      ds = load_movielens(FLAGS.output_dir)
      oracle = calibration.oracle_statistics(ds, movielens_synth.expected_ratings(FLAGS.seed))
      print(calibration.format_statistics({**calibration.statistics(ds),
                                           **calibration.factor_statistics(ds), **oracle}))
  except (DataError, OSError) as e:      # one line, no traceback; no TensorFlow import needed
    problem = e if isinstance(e, DataError) else f'cannot write {FLAGS.output_dir}: {e.strerror}.'
    print(f'error: {problem}', file=sys.stderr)
    sys.exit(1)
  print(f'Wrote a generated ml-100k-shaped folder (seed {FLAGS.seed}, not MovieLens data) to '
        f'{FLAGS.output_dir}', file=sys.stderr)


if __name__ == '__main__':
  cli.run(main)
