r"""Writes an EMNIST-shaped TFF sqlite file of many synthetic writers, for the data benchmarks.

  python -m benchmarks.make_emnist_like --clients=20000 --mean_examples=200 \
      --output=bench_data/emnist_20k/emnist_all.sqlite

The file has the schema and feature spec of TFF's `emnist_all.sqlite`
(tables `examples(split_name, client_id, serialized_example_proto)` and
`client_metadata(client_id, split_name, num_examples)`; `tf.train.Example`s
with `pixels` float32 28x28, 1.0 = background, and `label` int64 in [0, 62)),
so `load_dataset('emnist', cache_dir=<its folder>)` and TFF's
`emnist.load_data` read it. Only the splits `all_train` and `all_test` are
written (not the `digits_only_*` ones). Each writer has n examples drawn from
a gamma distribution of mean --mean_examples and shape --count_shape (at
least --min_examples), of which round(--test_fraction * n) are `all_test`;
its rows are written together, train then test, as in TFF's file. Pixels are
1.0 but for a random ~15% of "ink" in [0, 1). Deterministic in --seed.

Rows are streamed to sqlite one writer at a time, committed every
--commit_every writers, into `<output>.partial`, renamed to `--output` when
complete (an interrupted run leaves no file of the final name). Each example
is a 3,175-byte row, one per 4 KB sqlite page, so the file takes ~4 KB per
example. Before writing, the encoder is checked against `tf.train.Example`'s
serialization; after, the file is indexed as the loader indexes it (counts
against `client_metadata`, every writer's rows together) and one writer is
read back and compared with what was written.
"""

import os
import sqlite3
import struct
import sys
import time

import numpy as np
from absl import app, flags

flags.DEFINE_integer('clients', 1000, 'Writers (clients).')
flags.DEFINE_float('mean_examples', 200.0, 'Mean examples per writer (TFF\'s EMNIST: 226).')
flags.DEFINE_float('count_shape', 8.0, 'Shape of the gamma distribution of the counts '
                   '(8: a spread of mean / sqrt(8), ~35% of the mean).')
flags.DEFINE_integer('min_examples', 2, 'Fewest examples of a writer.')
flags.DEFINE_float('test_fraction', 0.1, 'Share of a writer\'s examples in all_test.')
flags.DEFINE_integer('seed', 0, 'Seed of counts, labels and pixels.')
flags.DEFINE_integer('commit_every', 500, 'Writers per sqlite transaction.')
flags.DEFINE_string('output', None, 'The sqlite file to write (name it emnist_all.sqlite).')
FLAGS = flags.FLAGS

SCHEMA = ('CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
          'serialized_example_proto BLOB NOT NULL)',
          'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, '
          'num_examples INTEGER NOT NULL)')


def _varint(value: int) -> bytes:
  out = bytearray()
  while True:
    byte, value = value & 0x7F, value >> 7
    out.append(byte | (0x80 if value else 0))
    if not value:
      return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def serialize_example(pixels: np.ndarray, label: int) -> bytes:
  """The `tf.train.Example` {'label': int64_list [label], 'pixels': float_list [784]},
  encoded directly (what `tf.train.Example.SerializeToString` gives, map keys sorted)."""
  label_feature = _field(3, _field(1, _varint(label)))             # Feature.int64_list, packed
  floats = np.ascontiguousarray(pixels, '<f4').tobytes()
  pixels_feature = _field(2, _field(1, floats))                    # Feature.float_list, packed
  entries = (_field(1, _field(1, b'label') + _field(2, label_feature))
             + _field(1, _field(1, b'pixels') + _field(2, pixels_feature)))
  return _field(1, entries)                                        # Example.features


def client_counts(rng: np.random.Generator, clients: int, mean: float, shape: float,
                  minimum: int) -> np.ndarray:
  """Per-writer example counts: gamma(shape, mean / shape), rounded, at least `minimum`."""
  return np.maximum(np.round(rng.gamma(shape, mean / shape, clients)), minimum).astype(np.int64)


def client_examples(rng: np.random.Generator, n: int):
  """n writer images (1.0 background, ~15% ink in [0, 1)) and labels in [0, 62)."""
  pixels = np.ones((n, 28, 28), np.float32)
  ink = rng.random((n, 28, 28)) < 0.15
  pixels[ink] = rng.random(int(ink.sum()), dtype=np.float32)
  return pixels, rng.integers(0, 62, n)


def write(path: str, clients: int, mean: float, shape: float, minimum: int,
          test_fraction: float, seed: int, commit_every: int) -> int:
  """Writes the file (see the module docstring); returns its examples."""
  partial = path + '.partial'
  if os.path.exists(partial):
    os.remove(partial)
  rng = np.random.default_rng(seed)
  counts = client_counts(rng, clients, mean, shape, minimum)
  width = len(str(clients - 1))
  conn = sqlite3.connect(partial)
  try:
    for statement in SCHEMA:
      conn.execute(statement)
    for k, n in enumerate(counts):
      cid = f'w{k:0{width}d}_{k % 100:02d}'
      n_test = int(round(test_fraction * n))
      pixels, labels = client_examples(rng, int(n))
      blobs = [serialize_example(p, int(y)) for p, y in zip(pixels, labels)]
      for split, rows in (('all_train', blobs[:n - n_test]), ('all_test', blobs[n - n_test:])):
        conn.executemany('INSERT INTO examples VALUES (?, ?, ?)',
                         ((split, cid, b) for b in rows))
        conn.execute('INSERT INTO client_metadata VALUES (?, ?, ?)', (cid, split, len(rows)))
      if (k + 1) % commit_every == 0:
        conn.commit()
    conn.commit()
  finally:
    conn.close()
  os.replace(partial, path)
  return int(counts.sum())


def check_encoder(seed: int) -> None:
  """Raises unless `serialize_example` gives `tf.train.Example`'s bytes."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  pixels, labels = client_examples(np.random.default_rng(seed), 3)
  for p, y in zip(pixels, labels):
    want = tf.train.Example(features=tf.train.Features(feature={
        'pixels': tf.train.Feature(float_list=tf.train.FloatList(value=p.ravel())),
        'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)]))}))
    if serialize_example(p, int(y)) != want.SerializeToString():
      raise AssertionError('serialize_example differs from tf.train.Example\'s serialization')


def check_file(path: str, clients: int, mean: float, shape: float, minimum: int,
               test_fraction: float, seed: int) -> None:
  """Raises unless the loader indexes `path` by rowid ranges and reads writer 0 as written."""
  from tff_meta.data import tff_native, tff_sqlite  # pylint: disable=g-import-not-at-top
  index = tff_sqlite.index_clients(path, ('all_train', 'all_test'), 0)   # counts checked
  try:
    if index.num_scattered or len(index.ids) != clients:
      raise AssertionError(f'{path}: {len(index.ids)} writers, {index.num_scattered} scattered')
    rng = np.random.default_rng(seed)
    n = int(client_counts(rng, clients, mean, shape, minimum)[0])
    pixels, labels = client_examples(rng, n)
    got = tff_native.load_emnist(os.path.dirname(path), download=False).clients[index.ids[0]]
    if not (np.array_equal(got.x, pixels) and np.array_equal(got.y, labels)):
      raise AssertionError(f'{path}: writer {index.ids[0]} reads back different examples')
  finally:
    index.close()


def main(argv):
  del argv
  if not FLAGS.output:
    sys.exit('error: --output is required (a path ending in emnist_all.sqlite, outside the repo)')
  start = time.perf_counter()
  check_encoder(FLAGS.seed)
  os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
  shape = (FLAGS.clients, FLAGS.mean_examples, FLAGS.count_shape, FLAGS.min_examples,
           FLAGS.test_fraction, FLAGS.seed)
  total = write(FLAGS.output, *shape, FLAGS.commit_every)
  check_file(FLAGS.output, *shape)
  print(f'{FLAGS.output}: {FLAGS.clients} writers, {total} examples, '
        f'{os.path.getsize(FLAGS.output) / 2**30:.2f} GiB in {time.perf_counter() - start:.0f} s')


if __name__ == '__main__':
  app.run(main)
