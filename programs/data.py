r"""Prints FedMeta Table 1 statistics (clients, samples, classes, per-client spread) of a dataset.

  python -m programs.data --dataset=digits
  python -m programs.data --dataset=emnist --cache_dir=<tff data folder>
  python -m programs.data --dataset=leaf_femnist --data_option path=<leaf femnist folder>
  python -m programs.data --dataset=fashion_mnist --data_option partition=dirichlet \
      --data_option alpha=0.1 --min_samples=10
  python -m programs.data --dataset=movielens --data_option path=/data/ml-100k

Any source of `tff_meta.data.DATASETS` works; --data_option key=value passes
loader options (values parse as int, float, true/false, none, else string).
--min_samples applies the protocol's filter first (FedMeta: 10 / 20 / 25
for FEMNIST / Shakespeare / Sent140).

MovieLens (`--dataset=movielens`) has ratings instead of classes; for it the
table has per-user columns instead: users, ratings, items, ratings per user
(mean, stdev, min, max) and the mean rating (--min_samples counts ratings).
"""

import dataclasses
import json

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402

from tff_meta.data import load_dataset  # noqa: E402
from tff_meta.data import stats as stats_lib  # noqa: E402
from tff_meta.data.types import DataError  # noqa: E402
from tff_meta.program import errors  # noqa: E402

flags.DEFINE_string('dataset', 'digits', 'A name in tff_meta.data.DATASETS.')
flags.DEFINE_string('cache_dir', None, 'Folder of TFF sqlite files (emnist, shakespeare, '
                    'tff_cifar100, stackoverflow).')
flags.DEFINE_multi_string('data_option', [], 'Loader option key=value (repeatable).')
flags.DEFINE_integer('min_samples', 0, 'Leave out clients with fewer samples (0 = keep all).')
flags.DEFINE_enum('format', 'table', ['table', 'json'], 'Output format.')
FLAGS = flags.FLAGS


def parse_value(text: str):
  """'3' -> 3, '0.5' -> 0.5, 'true' -> True, 'none' -> None, else the string."""
  lowered = text.strip().lower()
  if lowered in ('true', 'false'):
    return lowered == 'true'
  if lowered in ('none', 'null'):
    return None
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return text


def parse_options(items) -> dict:
  options = {}
  for item in items:
    key, sep, value = item.partition('=')
    if not sep or not key.strip():
      raise ValueError(f'--data_option must be key=value, got {item!r}.')
    options[key.strip()] = parse_value(value)
  return options


def main(argv):
  del argv
  try:
    options = parse_options(FLAGS.data_option)
    if FLAGS.cache_dir is not None:
      options['cache_dir'] = FLAGS.cache_dir
    dataset = load_dataset(FLAGS.dataset, **options)
  except ValueError as e:   # e.g. a loader option out of range; DataError is one too
    errors.fail(e)
  except TypeError as e:    # an option the loader does not take
    errors.fail(DataError(f'--data_option: {e}; see docs/DATA.md for each dataset\'s options.'))
  result = stats_lib.compute_stats(dataset, FLAGS.min_samples)
  if FLAGS.format == 'json':
    print(json.dumps(dataclasses.asdict(result), indent=1))
    return
  print(f'{dataset.name}: {dataset.description}')
  print(stats_lib.format_table([result]))
  unit, what = (('ratings', 'users') if isinstance(result, stats_lib.RatingsStats)
                else ('samples', 'clients'))
  rule = f'fewer than {FLAGS.min_samples} {unit}' if FLAGS.min_samples > 0 else 'empty'
  print(f'{result.filtered} of {len(dataset.clients)} {what} left out ({rule}).')


if __name__ == '__main__':
  errors.run(main)
