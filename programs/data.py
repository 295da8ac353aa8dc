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
for FEMNIST / Shakespeare / Sent140). --seeds also prints, for each seed, the
train / validation / test clients that a run of that seed uses (the protocol's
client split after the filter and --draw_clients; the ids with --format=json):

  python -m programs.data --dataset=emnist --cache_dir=<folder> --min_samples=10 --seeds=0,1,2

MovieLens (`--dataset=movielens`) has ratings instead of classes; for it the
table has per-user columns instead: users, ratings, items, ratings per user
(mean, stdev, min, max) and the mean rating (--min_samples counts ratings).
"""

import dataclasses
import json

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402

from tff_meta.data import load_dataset, protocol  # noqa: E402
from tff_meta.data import stats as stats_lib  # noqa: E402
from tff_meta.data.types import DataError  # noqa: E402
from tff_meta.program import errors  # noqa: E402

flags.DEFINE_string('dataset', 'digits', 'A name in tff_meta.data.DATASETS.')
flags.DEFINE_string('cache_dir', None, 'Folder of TFF sqlite files (emnist, shakespeare, '
                    'tff_cifar100, stackoverflow).')
flags.DEFINE_multi_string('data_option', [], 'Loader option key=value (repeatable).')
flags.DEFINE_integer('min_samples', 0, 'Leave out clients with fewer samples (0 = keep all).')
flags.DEFINE_list('seeds', [], 'Also print each seed\'s train / validation / test clients '
                  '(the protocol\'s client split, e.g. --seeds=0,1,2).')
flags.DEFINE_list('client_split', ['0.8', '0.1', '0.1'], 'Train/validation/test client '
                  'fractions for --seeds (FedMeta Sec. 4.1: 0.8,0.1,0.1).')
flags.DEFINE_integer('draw_clients', 0, 'For --seeds: keep at most N of the clients that pass '
                     '--min_samples, drawn by seed (FedMeta FEMNIST: 1068); 0 = all.')
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
  splits = _seed_splits(dataset)
  if FLAGS.format == 'json':
    print(json.dumps({**dataclasses.asdict(result), **({'seeds': splits} if splits else {})},
                     indent=1))
    return
  print(f'{dataset.name}: {dataset.description}')
  print(stats_lib.format_table([result]))
  unit, what = (('ratings', 'users') if isinstance(result, stats_lib.RatingsStats)
                else ('samples', 'clients'))
  rule = f'fewer than {FLAGS.min_samples} {unit}' if FLAGS.min_samples > 0 else 'empty'
  print(f'{result.filtered} of {len(dataset.clients)} {what} left out ({rule}); '
        f'{len(dataset.clients) - result.filtered} kept.')
  for seed, split in splits.items():
    drawn = f' ({split["not_drawn"]} not drawn: draw_clients)' if split['not_drawn'] else ''
    print(f'seed {seed}: {len(split["train"])} train / {len(split["validation"])} validation / '
          f'{len(split["test"])} test {what}{drawn}; test: {" ".join(split["test"])}')


def _seed_splits(dataset) -> dict:
  """{seed: {'train': ids, 'validation': ids, 'test': ids, 'not_drawn': n}} for --seeds."""
  if not FLAGS.seeds:
    return {}
  if not hasattr(dataset, 'sizes'):   # ratings (MovieLens): the recommendation protocol's users
    errors.fail(DataError(f'--seeds prints the client split of labelled-example datasets; '
                          f'{FLAGS.dataset} holds ratings (see docs/PROTOCOL.md for its users).'))
  try:
    seeds = [int(s) for s in FLAGS.seeds]
    fractions = tuple(float(f) for f in FLAGS.client_split)
  except ValueError:
    errors.fail(DataError(f'--seeds and --client_split take numbers, e.g. --seeds=0,1,2 '
                          f'--client_split=0.8,0.1,0.1; got {",".join(FLAGS.seeds)!r} and '
                          f'{",".join(FLAGS.client_split)!r}.'))
  k = max(FLAGS.min_samples, 2)   # as protocol.prepare: a split needs 2 examples
  kept = sorted(c for c, n in dataset.sizes().items() if n >= k)
  out = {}
  for seed in seeds:
    drawn = protocol.draw_clients(kept, FLAGS.draw_clients, seed)
    try:
      train, val, test = protocol.split_clients(drawn, fractions, seed)
    except ValueError as e:
      errors.fail(DataError(f'--client_split: {e}'))
    out[seed] = {'train': train, 'validation': val, 'test': test,
                 'not_drawn': len(kept) - len(drawn)}
  return out


if __name__ == '__main__':
  errors.run(main)
