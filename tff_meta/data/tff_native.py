"""Loaders for TFF's native sqlite datasets (EMNIST, Shakespeare, CIFAR-100,
Stack Overflow), offline.

Reads the files that `tff.simulation.datasets.<name>.load_data` (TFF 0.87)
keeps in its `cache_dir` (default `~/.tff`): `emnist_all.sqlite` (for both
`only_digits` values; the digits are the `digits_only_*` splits of the same
file), `shakespeare.sqlite`, `cifar100.sqlite` and `stackoverflow.sqlite`
(each is the download `<name>.sqlite.lzma` decompressed by TFF). All hold
TFF's `SqlClientData` schema: table `examples(split_name, client_id,
serialized_example_proto)` of serialized `tf.train.Example`s and table
`client_metadata(client_id, split_name, num_examples)`.

The file is checked first, so a missing file raises `DataError` naming the
path to place instead of letting TFF try a download (which fails offline).

By default the examples are read in bulk: one sqlite query per split (per
chunk of client ids when `max_clients` keeps a subset) and
`tf.io.parse_example` over all rows, in the sqlite scan (rowid) order that
TFF's per-client `SqlDataset` query uses, so every client's arrays are
identical to iterating `ClientData.create_tf_dataset_for_client` (checked by
the tests). `via_tff=True` reads through TFF's `ClientData` instead (slower).

Client ids are sorted (as `SqlClientData.client_ids`); split 'all'
concatenates each client's train examples followed by its test examples (and,
for Stack Overflow, its held-out examples; the FedMeta protocol re-splits
every client itself). CIFAR-100's train and test clients are different
partitions, so there 'all' keeps them as separate clients.
"""

from __future__ import annotations

import collections
import os
import sqlite3
import json
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from tff_meta.data import text
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset

EMNIST_FILE = 'emnist_all.sqlite'
SHAKESPEARE_FILE = 'shakespeare.sqlite'
CIFAR100_FILE = 'cifar100.sqlite'
STACKOVERFLOW_FILE = 'stackoverflow.sqlite'
# Side files of `stackoverflow.load_word_counts` / `load_tag_counts`, which
# `tf.keras.utils.get_file` extracts into `<cache_dir>/datasets/`.
STACKOVERFLOW_WORD_COUNT_FILE = 'stackoverflow.word_count'
STACKOVERFLOW_TAG_COUNT_FILE = 'stackoverflow.tag_count'
_EMNIST_SPEC = {
    'pixels': tf.io.FixedLenFeature(shape=(28, 28), dtype=tf.float32),
    'label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
}
_SHAKESPEARE_SPEC = {
    'snippets': tf.io.FixedLenFeature(shape=(), dtype=tf.string),
}
# As in `tff.simulation.datasets.cifar100`: images are stored as int64.
_CIFAR100_SPEC = {
    'coarse_label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
    'image': tf.io.FixedLenFeature(shape=(32, 32, 3), dtype=tf.int64),
    'label': tf.io.FixedLenFeature(shape=(), dtype=tf.int64),
}
_CIFAR100_CASTS = {'image': np.uint8, 'label': np.int32,
                   'coarse_label': np.int32}
# The features of `tff.simulation.datasets.stackoverflow` that the tag task
# reads (the file also holds creation_date, score and type).
_STACKOVERFLOW_SPEC = {
    'tags': tf.io.FixedLenFeature(shape=(), dtype=tf.string),
    'title': tf.io.FixedLenFeature(shape=(), dtype=tf.string),
    'tokens': tf.io.FixedLenFeature(shape=(), dtype=tf.string),
}
_STACKOVERFLOW_SPLITS = {'train': ('train',), 'test': ('test',),
                         'heldout': ('heldout',),
                         'all': ('train', 'test', 'heldout')}
_SPLITS = ('train', 'test', 'all')
_PARSE_CHUNK = 10000  # rows per tf.io.parse_example call
_IDS_PER_QUERY = 500  # client ids per `IN (...)` query (sqlite variable limit)


def sqlite_path(cache_dir: Optional[str], filename: str) -> str:
  """The file TFF's loader reads, checked to exist (no download is tried)."""
  folder = (cache_dir if cache_dir is not None else
            os.path.join(os.path.expanduser('~'), '.tff'))
  path = os.path.join(folder, filename)
  if not os.path.isfile(path):
    raise DataError(
        f'TFF dataset file not found: {path!r} (folder {folder!r} '
        f'{"exists" if os.path.isdir(folder) else "does not exist"}). Either '
        f'run tff.simulation.datasets once on a machine with internet using '
        f'cache_dir={folder!r}, which downloads and decompresses it there, or '
        f'copy an existing {filename} into that folder.')
  return path


def _split_names(split: str, train: str, test: str) -> Tuple[str, ...]:
  if split not in _SPLITS:
    raise DataError(f'split must be one of {_SPLITS}, got {split!r}.')
  return {'train': (train,), 'test': (test,), 'all': (train, test)}[split]


def _connect(path: str) -> sqlite3.Connection:
  try:
    conn = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
    tables = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
  except sqlite3.DatabaseError as e:
    raise DataError(f'{path!r} is not a readable sqlite file ({e}); '
                    're-download it with tff.simulation.datasets.') from e
  if not {'examples', 'client_metadata'} <= tables:
    raise DataError(
        f'{path!r} lacks the tables `examples` and `client_metadata` of '
        f"TFF's SqlClientData format (has {sorted(tables)}); re-download it.")
  return conn


def _client_ids(conn: sqlite3.Connection, path: str, splits: Sequence[str],
                max_clients: int) -> List[str]:
  marks = ','.join('?' * len(splits))
  ids = sorted(r[0] for r in conn.execute(
      f'SELECT DISTINCT client_id FROM client_metadata '
      f'WHERE split_name IN ({marks})', tuple(splits)))
  if not ids:
    raise DataError(f'{path!r} has no clients in splits {list(splits)}.')
  return ids[:max_clients] if max_clients > 0 else ids


def _parse_rows(blobs: Sequence[bytes], spec,
                casts: Optional[Dict[str, type]]) -> Dict[str, np.ndarray]:
  """Parsed features of serialized examples, in chunks; `casts` narrows dtypes."""
  casts = casts or {}
  chunks = collections.defaultdict(list)
  for start in range(0, len(blobs), _PARSE_CHUNK):
    parsed = tf.io.parse_example(
        tf.constant(blobs[start:start + _PARSE_CHUNK]), spec)
    for k, v in parsed.items():
      chunks[k].append(v.numpy().astype(casts.get(k, v.dtype.as_numpy_dtype),
                                        copy=False))
  return {k: (np.concatenate(chunks[k]) if chunks[k] else
              np.zeros((0,) + tuple(s.shape),
                       casts.get(k, s.dtype.as_numpy_dtype)))
          for k, s in spec.items()}


def _read_split_bulk(conn: sqlite3.Connection, split: str,
                     client_ids: Sequence[str], spec, subset: bool = False,
                     casts: Optional[Dict[str, type]] = None,
                     ) -> Dict[str, Dict[str, np.ndarray]]:
  """client id -> parsed features of its rows in one split, in rowid order.

  subset=True selects the clients in SQL (chunks of ids, each query in rowid
  order, so every client's rows keep rowid order) instead of scanning the
  whole split: much faster when `max_clients` keeps few of many clients.
  """
  wanted = set(client_ids)
  if subset:
    rows = []
    for start in range(0, len(client_ids), _IDS_PER_QUERY):
      chunk = tuple(client_ids[start:start + _IDS_PER_QUERY])
      rows.extend(conn.execute(
          'SELECT client_id, serialized_example_proto FROM examples '
          f'WHERE split_name = ? AND client_id IN ({",".join("?" * len(chunk))})'
          ' ORDER BY rowid', (split,) + chunk))
  else:
    rows = [r for r in conn.execute(
        'SELECT client_id, serialized_example_proto FROM examples '
        'WHERE split_name = ? ORDER BY rowid', (split,)) if r[0] in wanted]
  features = _parse_rows([r[1] for r in rows], spec, casts)
  positions = collections.defaultdict(list)
  for i, (cid, _) in enumerate(rows):
    positions[cid].append(i)
  return {cid: {k: v[np.asarray(positions[cid], dtype=np.int64)]
                for k, v in features.items()} for cid in client_ids}


def _read_bulk(path: str, splits: Sequence[str], max_clients: int, spec,
               casts: Optional[Dict[str, type]] = None,
               ) -> Dict[str, List[Dict[str, np.ndarray]]]:
  """client id -> one feature dict per split (in `splits` order)."""
  conn = _connect(path)
  try:
    ids = _client_ids(conn, path, splits, max_clients)
    per_split = [_read_split_bulk(conn, split, ids, spec, max_clients > 0,
                                  casts) for split in splits]
  finally:
    conn.close()
  return {cid: [features[cid] for features in per_split] for cid in ids}


def _read_via_tff(
    client_datas, max_clients: int,
    keys: Sequence[str]) -> Dict[str, List[Dict[str, np.ndarray]]]:
  """Same as `_read_bulk`, through `ClientData.create_tf_dataset_for_client`."""
  ids = sorted(set().union(*(cd.client_ids for cd in client_datas)))
  ids = ids[:max_clients] if max_clients > 0 else ids
  out = {}
  for cid in ids:
    parts = []
    for cd in client_datas:
      if cid in cd.client_ids:
        rows = list(cd.create_tf_dataset_for_client(cid).as_numpy_iterator())
      else:
        rows = []
      parts.append({k: np.array([r[k] for r in rows]) for k in keys})
    out[cid] = parts
  return out


def load_emnist(cache_dir: Optional[str] = None, only_digits: bool = False,
                split: str = 'all', max_clients: int = 0,
                via_tff: bool = False) -> FederatedDataset:
  """Federated EMNIST from `<cache_dir>/emnist_all.sqlite` (TFF's file).

  Args:
    cache_dir: the folder given to `tff.simulation.datasets.emnist.load_data`;
      None means TFF's default `~/.tff`.
    only_digits: the 10-class `digits_only_*` splits instead of the 62-class
      `all_*` splits.
    split: 'train', 'test', or 'all' (train then test, per client).
    max_clients: > 0 keeps the first N client ids in sorted order.
    via_tff: read through TFF's `ClientData` (same arrays, slower).

  Returns:
    `FederatedDataset` 'emnist': x float32 [n, 28, 28] exactly as stored
    (1.0 = background), y int32 in [0, 62) (or [0, 10)).
  """
  path = sqlite_path(cache_dir, EMNIST_FILE)
  prefix = 'digits_only' if only_digits else 'all'
  splits = _split_names(split, f'{prefix}_train', f'{prefix}_test')
  if via_tff:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    train, test = tff.simulation.datasets.emnist.load_data(
        only_digits=only_digits, cache_dir=os.path.dirname(path))
    chosen = {'train': [train], 'test': [test], 'all': [train, test]}[split]
    per_client = _read_via_tff(chosen, max_clients, ('pixels', 'label'))
  else:
    per_client = _read_bulk(path, splits, max_clients, _EMNIST_SPEC)
  clients = {}
  for cid, parts in per_client.items():
    x = np.concatenate([p['pixels'].reshape(-1, 28, 28) for p in parts])
    y = np.concatenate([p['label'].reshape(-1) for p in parts])
    clients[cid] = ClientArrays(x.astype(np.float32), y.astype(np.int32))
  return FederatedDataset(
      name='emnist', clients=clients, num_classes=10 if only_digits else 62,
      element_shape=(28, 28),
      description=(f'TFF federated EMNIST ({prefix}, split {split}) from '
                   f'{path}; 1.0 = background'))


def load_shakespeare(cache_dir: Optional[str] = None, split: str = 'all',
                     max_clients: int = 0, seq_length: int = 80,
                     stride: int = 1,
                     via_tff: bool = False) -> FederatedDataset:
  """Federated Shakespeare from `<cache_dir>/shakespeare.sqlite` (TFF's file).

  Every snippet of a speaking role becomes next-character examples with
  `text.char_windows`: windows of `seq_length` characters starting every
  `stride` characters, labelled with the following character; snippets
  shorter than seq_length + 1 are left-padded with id 0 (one example each),
  1-character and empty snippets give none. stride=1 matches LEAF's own
  preprocessing (stride 1 over the role's text) and gives ~1.63M examples
  (~0.5 GB as int32) for the full file (715 roles, splits train+test); use
  `max_clients` or a larger `stride` to keep it small.

  Args:
    cache_dir: the folder given to `tff.simulation.datasets.shakespeare
      .load_data`; None means TFF's default `~/.tff`.
    split: 'train', 'test', or 'all' (train then test, per client).
    max_clients: > 0 keeps the first N client ids in sorted order.
    seq_length: characters per example.
    stride: distance between the starts of consecutive windows.
    via_tff: read through TFF's `ClientData` (same arrays, slower).

  Returns:
    `FederatedDataset` 'shakespeare': x int32 [n, seq_length] character ids
    (`text.ALL_LETTERS`, 1..80, 0 = pad), y int32 [n]; num_classes 81.
  """
  if seq_length < 1 or stride < 1:
    raise DataError(f'seq_length and stride must be >= 1, got {seq_length}, '
                    f'{stride}.')
  path = sqlite_path(cache_dir, SHAKESPEARE_FILE)
  splits = _split_names(split, 'train', 'test')
  if via_tff:
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    train, test = tff.simulation.datasets.shakespeare.load_data(
        cache_dir=os.path.dirname(path))
    chosen = {'train': [train], 'test': [test], 'all': [train, test]}[split]
    per_client = _read_via_tff(chosen, max_clients, ('snippets',))
  else:
    per_client = _read_bulk(path, splits, max_clients, _SHAKESPEARE_SPEC)
  clients = {}
  for cid, parts in per_client.items():
    xs, ys = [], []
    for part in parts:
      for snippet in part['snippets']:
        ids = text.encode_chars(snippet.decode('utf-8'))
        x, y = text.char_windows(ids, seq_length, stride)
        xs.append(x)
        ys.append(y)
    if xs:
      clients[cid] = ClientArrays(np.concatenate(xs), np.concatenate(ys))
    else:
      clients[cid] = ClientArrays(np.zeros((0, seq_length), np.int32),
                                  np.zeros((0,), np.int32))
  return FederatedDataset(
      name='shakespeare', clients=clients, num_classes=text.NUM_CHAR_CLASSES,
      element_shape=(seq_length,),
      description=(f'TFF federated Shakespeare (split {split}) from {path}: '
                   f'{seq_length}-char windows, stride {stride}, next-char '
                   f'labels, LEAF character ids'))


def load_tff_cifar100(cache_dir: Optional[str] = None, split: str = 'all',
                      max_clients: int = 0,
                      label: str = 'fine') -> FederatedDataset:
  """Federated CIFAR-100 from `<cache_dir>/cifar100.sqlite` (TFF's file).

  TFF's partition (Pachinko allocation over coarse then fine labels, see
  `tff.simulation.datasets.cifar100.load_data`): 500 train clients and 100
  test clients of 100 images each, with ids '0'..'499' and '0'..'99'. The
  two splits partition different images (CIFAR-100's train and test sets),
  so a train and a test client with the same id are unrelated: split 'all'
  keeps them apart, as 600 clients, the train ids as they are followed by
  the test ids prefixed 'test/'.

  Args:
    cache_dir: the folder given to `tff.simulation.datasets.cifar100
      .load_data`; None means TFF's default `~/.tff`.
    split: 'train', 'test', or 'all' (both, test ids prefixed 'test/').
    max_clients: > 0 keeps the first N clients: client ids in sorted
      (string) order, train clients before test clients for 'all'.
    label: 'fine' (100 classes, feature `label`) or 'coarse' (20
      superclasses, feature `coarse_label`).

  Returns:
    `FederatedDataset` 'tff_cifar100': x float32 [n, 32, 32, 3] RGB, the
    stored uint8 values / 255 (in [0, 1]), y int32 in [0, 100) (or [0, 20));
    `extras['coarse_labels']` (or `extras['fine_labels']`) maps each client
    to its other label, int32 [n] in the order of y.
  """
  if label not in ('fine', 'coarse'):
    raise DataError(f"label must be 'fine' or 'coarse', got {label!r}.")
  path = sqlite_path(cache_dir, CIFAR100_FILE)
  splits = _split_names(split, 'train', 'test')
  per_client = {}
  for name in splits:
    budget = max_clients - len(per_client) if max_clients > 0 else 0
    if max_clients > 0 and budget <= 0:
      break
    prefix = 'test/' if split == 'all' and name == 'test' else ''
    for cid, parts in _read_bulk(path, (name,), budget, _CIFAR100_SPEC,
                                 _CIFAR100_CASTS).items():
      per_client[prefix + cid] = parts[0]
  key, other_key = (('label', 'coarse_label') if label == 'fine' else
                    ('coarse_label', 'label'))
  clients, other = {}, {}
  for cid, part in per_client.items():
    clients[cid] = ClientArrays(
        part['image'].reshape(-1, 32, 32, 3).astype(np.float32)
        / np.float32(255), part[key].reshape(-1).astype(np.int32))
    other[cid] = part[other_key].reshape(-1).astype(np.int32)
  return FederatedDataset(
      name='tff_cifar100', clients=clients,
      num_classes=100 if label == 'fine' else 20, element_shape=(32, 32, 3),
      description=(f'TFF federated CIFAR-100 ({label} labels, split {split}) '
                   f'from {path}; RGB in [0, 1]'),
      extras={('coarse_labels' if label == 'fine' else 'fine_labels'): other})


def _side_file(cache_dir: Optional[str], filename: str) -> Optional[str]:
  """Where TFF's stackoverflow word/tag count download was extracted, if any."""
  folder = (cache_dir if cache_dir is not None else
            os.path.join(os.path.expanduser('~'), '.tff'))
  candidates = [os.path.join(folder, filename),
                os.path.join(folder, 'datasets', filename)]
  if cache_dir is None:  # tf.keras.utils.get_file's own default.
    candidates.append(os.path.join(os.path.expanduser('~'), '.keras',
                                   'datasets', filename))
  return next((c for c in candidates if os.path.isfile(c)), None)


def _read_word_count_file(path: str, limit: int) -> List[str]:
  """The first `limit` words of a `stackoverflow.word_count` file ('word count' lines)."""
  words = []
  try:
    with open(path, encoding='utf-8') as f:
      for lineno, line in enumerate(f, start=1):
        if not line.strip():
          continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].lstrip('-').isdigit():
          raise DataError(f'{path}, line {lineno}: expected "word count", '
                          f'found {line.rstrip()[:60]!r}.')
        words.append(parts[0])
        if len(words) >= limit:
          break
  except (OSError, UnicodeDecodeError) as e:
    raise DataError(f'Cannot read word counts {path!r}: {e}.') from e
  return words


def _read_tag_count_file(path: str, limit: int) -> List[str]:
  """The `limit` most frequent tags of a `stackoverflow.tag_count` JSON file.

  Sorted by decreasing count, ties in file order (as `load_tag_counts`).
  """
  try:
    with open(path, encoding='utf-8') as f:
      counts = json.load(f)
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise DataError(f'Cannot read tag counts {path!r}: {e}.') from e
  if not isinstance(counts, dict) or not all(
      isinstance(v, int) for v in counts.values()):
    raise DataError(f'{path!r} must be a JSON object tag -> count.')
  ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)
  return [tag for tag, _ in ranked[:limit]]


def _count_by_clients(per_client: Dict[str, List[Dict[str, np.ndarray]]],
                      feature: str, sep: Optional[bytes],
                      limit: int) -> List[str]:
  """The `limit` values of `feature` used by the most clients (ties: sorted).

  As TFF's count files: each value counts the clients having at least one
  example with it (words: `tokens` split on whitespace; tags: split on '|').
  """
  counts = collections.Counter()
  for parts in per_client.values():
    seen = set()
    for part in parts:
      for value in part[feature]:
        seen.update(value.split(sep))
    seen.discard(b'')
    counts.update(seen)
  ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
  return [v.decode('utf-8') for v, _ in ranked[:limit]]


def _vocabulary(given: Union[None, str, Sequence[str]], limit: int,
                what: str, cache_dir: Optional[str], count_file: str,
                read_file: Callable[[str, int], List[str]],
                from_data: Callable[[], List[str]]) -> Tuple[List[str], str]:
  """(vocabulary in rank order, where it came from)."""
  if isinstance(given, str):
    if not os.path.isfile(given):
      raise DataError(f'{what} file {given!r} not found.')
    vocab, source = read_file(given, limit), given
  elif given is not None:
    vocab, source = [str(v) for v in list(given)[:limit]], 'given list'
  else:
    found = _side_file(cache_dir, count_file)
    if found is not None:
      vocab, source = read_file(found, limit), found
    else:
      vocab, source = from_data(), 'counted over the loaded clients'
  duplicates = sorted(v for v, n in collections.Counter(vocab).items() if n > 1)
  if duplicates:
    raise DataError(f'{what} from {source} repeats {duplicates[:5]}.')
  if not vocab:
    raise DataError(f'{what} from {source} is empty.')
  return vocab, source


def load_stackoverflow(cache_dir: Optional[str] = None, split: str = 'train',
                       max_clients: int = 0, task: str = 'tag',
                       vocab_size: int = 10000, num_tags: int = 500,
                       words: Union[None, str, Sequence[str]] = None,
                       tags: Union[None, str, Sequence[str]] = None,
                       ) -> FederatedDataset:
  """Federated Stack Overflow tag prediction from `<cache_dir>/stackoverflow.sqlite`.

  Task (the only one, task='tag'): predict a post's most frequent tag from
  the bag of words of its body and title. x is exactly the input of TFF's
  own tag-prediction baseline (`tff.simulation.baselines.stackoverflow`,
  `tag_prediction_preprocessing.build_to_ids_fn`): the words of
  `tokens + ' ' + title` (split on whitespace) that are in the `vocab_size`
  word vocabulary, counted per word and divided by their total (all zeros
  when none is in the vocabulary). TFF's target is multi-label (every tag
  among the `num_tags` most frequent); `FederatedDataset` holds one class
  per example, so y is the example's tag with the best rank in the tag
  vocabulary, i.e. the first 1 of TFF's multi-hot vector, and examples
  with no tag in the vocabulary are dropped (their count is in
  `extras['dropped_examples']`).

  Why this task and not next-word prediction: it is a classification with a
  fixed, moderate label set, so FedMeta's Table 1 statistics (classes per
  client) and the N-way/support-query protocol apply as for the LEAF tasks;
  each user's tag distribution is narrow and user-specific, which is the
  heterogeneity meta-learning personalizes to; and `logistic_regression` in
  `tff_meta.models` is TFF's baseline model for it. Next-token prediction
  is already covered by Shakespeare, and Stack Overflow next-word windows
  would multiply the examples by the sentence length with a 10k-way output.

  Vocabularies (rank order; `extras['words']` / `extras['tags']` hold the
  ones used, to pass to another split's load so both share them):
    * `words` / `tags` given as a list: used as is (first vocab_size /
      num_tags); given as a path: a file in the format of TFF's
      `stackoverflow.word_count` ('word count' lines, most frequent first)
      or `stackoverflow.tag_count` (JSON object tag -> count).
    * else TFF's files, `stackoverflow.word_count` / `stackoverflow.tag_count`
      in `<cache_dir>` or `<cache_dir>/datasets/` (where
      `stackoverflow.load_word_counts(cache_dir)` / `load_tag_counts`
      extract them; with cache_dir None also `~/.keras/datasets/`).
    * else counted over the loaded clients as TFF counts them: the number of
      clients using a word in `tokens` (or having a tag), ties in sorted order.

  Memory: x is dense float32, vocab_size * 4 bytes per example (40 kB for
  10,000 words); the full file has 135M train examples, so use
  `max_clients` (the bulk reader then selects those clients in SQL).

  Args:
    cache_dir: the folder given to `tff.simulation.datasets.stackoverflow
      .load_data`; None means TFF's default `~/.tff`.
    split: 'train', 'test', 'heldout', or 'all' (train, test, heldout per
      client; held-out users have no train/test examples).
    max_clients: > 0 keeps the first N client ids in sorted order.
    task: 'tag' (see above).
    vocab_size: words in the bag-of-words vocabulary (at most).
    num_tags: tags in the label vocabulary (at most) = num_classes.
    words: word vocabulary, a list or a word-count file path (see above).
    tags: tag vocabulary, a list or a tag-count JSON file path.

  Returns:
    `FederatedDataset` 'stackoverflow': x float32 [n, len(words)], y int32
    in [0, len(tags)); extras 'words', 'tags', 'word_source', 'tag_source',
    'dropped_examples'.
  """
  if task != 'tag':
    raise DataError(f"task must be 'tag' (most frequent tag from the bag of "
                    f"words; see the docstring), got {task!r}.")
  if vocab_size < 1 or num_tags < 1:
    raise DataError(f'vocab_size and num_tags must be >= 1, got {vocab_size},'
                    f' {num_tags}.')
  if split not in _STACKOVERFLOW_SPLITS:
    raise DataError(f'split must be one of {tuple(_STACKOVERFLOW_SPLITS)}, '
                    f'got {split!r}.')
  path = sqlite_path(cache_dir, STACKOVERFLOW_FILE)
  per_client = _read_bulk(path, _STACKOVERFLOW_SPLITS[split], max_clients,
                          _STACKOVERFLOW_SPEC)
  word_list, word_source = _vocabulary(
      words, vocab_size, 'word vocabulary', cache_dir,
      STACKOVERFLOW_WORD_COUNT_FILE, _read_word_count_file,
      lambda: _count_by_clients(per_client, 'tokens', None, vocab_size))
  tag_list, tag_source = _vocabulary(
      tags, num_tags, 'tag vocabulary', cache_dir,
      STACKOVERFLOW_TAG_COUNT_FILE, _read_tag_count_file,
      lambda: _count_by_clients(per_client, 'tags', b'|', num_tags))
  word_index = {w.encode('utf-8'): i for i, w in enumerate(word_list)}
  tag_rank = {t.encode('utf-8'): i for i, t in enumerate(tag_list)}
  clients, dropped = {}, 0
  for cid, parts in per_client.items():
    keep_text, labels = [], []
    for part in parts:
      for body, title, tag_string in zip(part['tokens'], part['title'],
                                         part['tags']):
        ranks = [tag_rank[t] for t in tag_string.split(b'|') if t in tag_rank]
        if not ranks:
          dropped += 1
          continue
        keep_text.append(body + b' ' + title)
        labels.append(min(ranks))
    x = np.zeros((len(labels), len(word_list)), np.float32)
    rows, cols = [], []
    for row, sentence in enumerate(keep_text):
      ids = [word_index[w] for w in sentence.split() if w in word_index]
      rows.extend([row] * len(ids))
      cols.extend(ids)
    np.add.at(x, (np.asarray(rows, np.int64), np.asarray(cols, np.int64)), 1)
    totals = x.sum(axis=1, keepdims=True)
    np.divide(x, totals, out=x, where=totals > 0)
    clients[cid] = ClientArrays(x, np.asarray(labels, np.int32))
  return FederatedDataset(
      name='stackoverflow', clients=clients, num_classes=len(tag_list),
      element_shape=(len(word_list),),
      description=(f'TFF federated Stack Overflow (split {split}) from {path}:'
                   f' most frequent of {len(tag_list)} tags from the bag of '
                   f'{len(word_list)} words of body + title; {dropped} '
                   f'examples without a vocabulary tag dropped'),
      extras={'words': tuple(word_list), 'tags': tuple(tag_list),
              'word_source': word_source, 'tag_source': tag_source,
              'dropped_examples': dropped})
