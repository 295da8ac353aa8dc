"""Federated Stack Overflow tag prediction from TFF's `stackoverflow.sqlite`, offline.

Reads the file that `tff.simulation.datasets.stackoverflow.load_data` (TFF
0.87) keeps in its `cache_dir` (default `~/.tff`; the download
`stackoverflow.sqlite.lzma` decompressed by TFF) through `tff_sqlite`, and
TFF's word and tag count files where they were extracted. Split 'all'
concatenates each client's train, test and held-out examples (the FedMeta
protocol re-splits every client itself).
"""

from __future__ import annotations

import collections
import json
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from tff_meta.data import tff_sqlite
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset

STACKOVERFLOW_FILE = 'stackoverflow.sqlite'
# Side files of `stackoverflow.load_word_counts` / `load_tag_counts`, which
# `tf.keras.utils.get_file` extracts into `<cache_dir>/datasets/`.
STACKOVERFLOW_WORD_COUNT_FILE = 'stackoverflow.word_count'
STACKOVERFLOW_TAG_COUNT_FILE = 'stackoverflow.tag_count'
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


def _side_file(cache_dir: Optional[str], filename: str) -> Optional[str]:
  """Where TFF's stackoverflow word/tag count download was extracted, if any."""
  folder = tff_sqlite.cache_folder(cache_dir)
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
                       download: bool = True) -> FederatedDataset:
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
    download: fetch a missing file with TFF's download helper (False: a
      missing file is a `DataError`; the programs' --no_download).

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
  path = tff_sqlite.sqlite_path(cache_dir, STACKOVERFLOW_FILE, download)
  per_client = tff_sqlite.read_clients(path, _STACKOVERFLOW_SPLITS[split], max_clients,
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
      name='stackoverflow', clients=clients, num_classes=len(tag_list), source=path,
      element_shape=(len(word_list),),
      description=(f'TFF federated Stack Overflow (split {split}) from {path}:'
                   f' most frequent of {len(tag_list)} tags from the bag of '
                   f'{len(word_list)} words of body + title; {dropped} '
                   f'examples without a vocabulary tag dropped'),
      extras={'words': tuple(word_list), 'tags': tuple(tag_list),
              'word_source': word_source, 'tag_source': tag_source,
              'dropped_examples': dropped})
