r"""Precision@k (rating 5) of simple rankings of MovieLens test users' query items (issue #15).

  python -m research.precision_ceiling_benchmark --data_path=/tmp/ml-100k-generated --seed=0

No TensorFlow, seconds of CPU. On the task's split (`--seed`, 80% of the users
train, a fifth of those held out as validation users, test users' support =
the first `--support_fraction` of their ratings, as the MovieLens configs)
it scores the rankings of `research.precision_ceiling` on the
validation and the test users: the item-mean floor, the bias baseline, genre
tastes (global by demographics, or per user from the support set), and item
factors learned from the training users with a per-user taste fitted on the
support set (ALS). On a folder written by `research.movielens_synth` (its README
names the generator seed) it adds the generator's oracle and its latent
rankings, and the within-user spread of each part of the generator's score.
The penalties are chosen on the validation users (mean P@1), never the test
users. Works on the real ml-100k too (without the generator's rows).
"""

import os
import re

import numpy as np
from absl import flags

from tff_meta.core.tables import markdown_table
from research.movielens_synth import synth as movielens_synth
from tff_meta.data.movielens import load_movielens
from tff_meta.data.types import DataError
from tff_meta.core import cli
from research import precision_ceiling as pc

flags.DEFINE_string('data_path', '', 'An ml-100k-shaped folder (u.data, u.user, u.item).')
flags.DEFINE_integer('seed', 0, 'Seed of the user split (the configs\' --seed).')
flags.DEFINE_float('support_fraction', 0.8, 'Test users\' support fraction.')
flags.DEFINE_float('validation_fraction', 0.2, 'Training users held out as validation users.')
flags.DEFINE_enum('sampling', 'chronological', ['chronological', 'random'], 'Support/query split.')
flags.DEFINE_list('penalties', ['1', '3', '10', '30'], 'Ridge penalties of the per-user fits.')
flags.DEFINE_integer('factors', 8, 'ALS item factors.')
FLAGS = flags.FLAGS


def generator_seed(folder: str):
  """The generator seed named by the folder's README, or None (not a generated folder)."""
  readme = os.path.join(folder, 'README')
  if not os.path.isfile(readme):
    return None
  text = open(readme, encoding='latin-1').read()
  match = re.match(re.escape(movielens_synth.README_START) + r' \(seed (-?\d+)\)', text)
  return int(match.group(1)) if match else None


def _penalties():
  try:
    values = [float(p) for p in FLAGS.penalties]
  except ValueError:
    values = []
  if not values or min(values) < 0:
    raise DataError(f'--penalties={",".join(FLAGS.penalties)}: give non-negative numbers, e.g. '
                    '--penalties=1,3,10,30.')
  return values


def main(argv):
  del argv
  if not FLAGS.data_path:
    raise DataError('--data_path is required: an ml-100k-shaped folder, e.g. one written by '
                    '`python -m research.movielens_synth --output_dir=/tmp/ml-100k-generated`.')
  if not os.path.isdir(FLAGS.data_path):
    raise DataError(f'--data_path={FLAGS.data_path} is not a folder; give the ml-100k folder.')
  if FLAGS.factors < 1:
    raise DataError(f'--factors={FLAGS.factors}: give at least 1.')
  penalties = _penalties()
  ds = load_movielens(FLAGS.data_path)
  episodes = pc.split(ds, seed=FLAGS.seed, support_fraction=FLAGS.support_fraction,
                      validation_fraction=FLAGS.validation_fraction, sampling=FLAGS.sampling)
  seed = generator_seed(FLAGS.data_path)
  latents = expected = None
  rankers = pc.rankers(penalties, FLAGS.factors)
  if seed is not None:
    latents, expected = movielens_synth.latent_factors(seed), movielens_synth.expected_ratings(seed)
    rankers.update(pc.LATENT_RANKERS)
  ctx = pc.context(ds, episodes, latents, expected)
  kind = 'not generated' if seed is None else f'GENERATED, generator seed {seed}'
  print(f'{FLAGS.data_path} ({kind}), split seed {FLAGS.seed}: {episodes.summary()}')
  groups = [('validation', episodes.validation), ('test', episodes.test)]
  rows, best = [], {}
  for name, rank in rankers.items():
    stars = not name.startswith('true_')
    results = [pc.scores(ctx, eps, rank, stars) if eps else {} for _, eps in groups]
    cells = []
    for r in results:
      cells += [f'{100 * r[f"p@{k}"]:.1f}' if r else '' for k in pc.K_VALUES]
      cells.append(f'{r["rmse"]:.4f}' if r.get('rmse') is not None else '')
    rows.append([name] + cells)
    family = re.sub(r'_\d[\d.e+-]*$', '', name)
    if family != name and results[0]:
      best.setdefault(family, []).append((results[0]['p@1'], name))
  header = ['ranking'] + [f'{g} {m}' for g, _ in groups
                          for m in [f'P@{k}' for k in pc.K_VALUES] + ['RMSE']]
  print(markdown_table(header, rows))
  for family, values in best.items():
    if len(values) > 1:
        print(f'{family}: penalty chosen on validation P@1: {max(values)[1]}')
  if latents is not None:
    users = [int(e.user) - 1 for e in episodes.test for _ in e.query_y]
    items = [int(i) - 1 for e in episodes.test for i in e.query_x[:, 0]]
    spread = pc.interaction_spread(latents, np.array(users), np.array(items))
    print('within-user sd of the generator\'s score parts on the test users\' query ratings '
          '(latent units; noise sd %.2f): ' % movielens_synth.Knobs().noise_sd
          + ', '.join(f'{k} {v:.3f}' for k, v in spread.items()))


if __name__ == '__main__':
  cli.run(main, (DataError, ValueError))
