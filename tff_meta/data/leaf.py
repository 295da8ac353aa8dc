"""Loaders for LEAF's JSON federated datasets (FEMNIST, Shakespeare, Sent140).

LEAF (https://github.com/TalwalkarLab/leaf, Caldas et al. 2018) writes every
dataset as JSON shards with the keys

    users:       [user id, ...]
    num_samples: [number of samples of each user, ...]
    user_data:   {user id: {x: [sample, ...], y: [label, ...]}}

under `data/all_data/*.json` (all of a user's data) and, after its
`preprocess.sh ... -t sample` split, `data/train/*.json` and
`data/test/*.json` (every user in both). Per task:

  femnist:     x = 784 floats (a 28x28 image, 1.0 = background), y in [0, 62).
  shakespeare: x = an 80-character string, y = the next character; both are
               mapped to ids with `text.ALL_LETTERS` (same ids as
               `tff_native.load_shakespeare`, 0 = pad, num_classes 81).
  sent140:     x = [tweet id, date, query, user, tweet text], y in {0, 1};
               the text is tokenized (`text.tokenize_tweet`) and mapped to
               `words_per_tweet` word ids (0 = pad, 1 = unknown).

Users are returned with sorted ids; a user found in several shards (or in
both train and test for split 'all') gets its examples concatenated, train
first. Within one shard a user must be listed once in `users` and once in
`user_data`, with as many samples as `num_samples` says: a shard that breaks
this, like a user whose samples cannot be read or fail the data check
(`checks`: finite pixels in [0, 1], labels in range), is a problem of that
user, named with the shard file and the first bad sample; it stops the load,
or with `[data] drop_bad_clients = true` leaves the user out.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Dict, List, Optional, Tuple

from absl import logging
import numpy as np

from tff_meta.data import checks, text
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset

TASKS = ('femnist', 'shakespeare', 'sent140')
_SPLITS = ('train', 'test', 'all')
_FIX = ('Regenerate it with LEAF\'s preprocess.sh (see '
        'https://github.com/TalwalkarLab/leaf) or point `path` at a folder '
        'of valid LEAF JSON shards.')


def _json_files(path: str, split: str) -> List[str]:
  """The shard files to read for `path` and `split` (see `load_leaf`)."""
  if not os.path.exists(path):
    raise DataError(f'LEAF data path not found: {path!r}. Pass a folder with '
                    'train/ and test/ subfolders of LEAF *.json shards, or a '
                    'folder or file of LEAF all_data*.json.')
  if os.path.isfile(path):
    if split != 'all':
      raise DataError(f'{path!r} is a single LEAF file; split {split!r} needs '
                      'a folder with train/ and test/ subfolders (use '
                      "split='all').")
    return [path]
  has_split_dirs = any(os.path.isdir(os.path.join(path, s))
                       for s in ('train', 'test'))
  if has_split_dirs:
    folders = [os.path.join(path, s) for s in
               ({'all': ('train', 'test')}.get(split, (split,)))]
  elif split != 'all':
    raise DataError(f'{path!r} has no train/ and test/ subfolders, so split '
                    f"{split!r} is not available; use split='all' for "
                    'all_data*.json shards.')
  else:
    folders = [path]
  files = []
  for folder in folders:
    found = sorted(glob.glob(os.path.join(folder, '*.json')))
    if not found:
      raise DataError(f'No LEAF *.json files in {folder!r}. ' + _FIX)
    files.extend(found)
  return files


class _Keys(dict):
  """A JSON object that remembers the keys it held more than once (json keeps the last)."""
  repeated: Tuple[str, ...] = ()


def _object(pairs) -> dict:
  out = _Keys(pairs)
  if len(out) != len(pairs):
    seen = set()
    out.repeated = tuple(k for k, _ in pairs if k in seen or seen.add(k))
  return out


def _read_json(path: str) -> dict:
  try:
    with open(path, encoding='utf-8') as f:
      data = json.load(f, object_pairs_hook=_object)
  except json.JSONDecodeError as e:
    raise DataError(f'{path}: malformed JSON at line {e.lineno} column '
                    f'{e.colno} (char {e.pos}): {e.msg}. ' + _FIX) from e
  except OSError as e:
    raise DataError(f'Cannot read {path!r}: {e.strerror}.') from e
  if not isinstance(data, dict):
    raise DataError(f'{path}: top level is {type(data).__name__}, expected a '
                    'JSON object with keys users, num_samples, user_data. '
                    + _FIX)
  for key in ('users', 'user_data'):
    if key not in data:
      raise DataError(f'{path}: missing key {key!r} (LEAF shards need users, '
                      'num_samples, user_data). ' + _FIX)
  return data


def _shard_users(path: str, data: dict
                 ) -> Tuple[List[Tuple[str, list, list]], Dict[str, str]]:
  """([(user, xs, ys)] of one shard's sound users, {user: problem} of the others).

  A missing `num_samples` is warned on; one of another length than `users`
  is an error of the shard; a user's count that differs from its samples is
  a problem of that user."""
  users, user_data = data['users'], data['user_data']
  if not isinstance(users, list) or not isinstance(user_data, dict):
    raise DataError(f'{path}: users must be a list and user_data an object. ' + _FIX)
  num_samples = data.get('num_samples')
  if num_samples is None:
    logging.warning('%s: no num_samples; the samples are counted.', path)
  elif not isinstance(num_samples, list) or len(num_samples) != len(users):
    count = len(num_samples) if isinstance(num_samples, list) else 'not a list of'
    raise DataError(f'{path}: num_samples has {count} entries for {len(users)} users; the '
                    'shard is damaged. ' + _FIX)
  positions: Dict[str, List[int]] = {}
  for i, user in enumerate(users):
    positions.setdefault(str(user), []).append(i)
  repeated = set(getattr(user_data, 'repeated', ()))
  out, problems = [], {}
  for i, user in enumerate(users):
    user = str(user)
    if positions[user][0] != i:
      continue
    problem = None
    record = user_data.get(user)
    if len(positions[user]) > 1:
      problem = (f'the shard\'s users list it {len(positions[user])} times (positions '
                 f'{", ".join(map(str, positions[user][:5]))}); a user is listed once')
    elif user in repeated:
      problem = 'the shard\'s user_data has two entries for it; a user has one'
    elif record is None:
      problem = 'the shard\'s users list it but user_data has no entry for it'
    elif not isinstance(record, dict) or 'x' not in record or 'y' not in record:
      key = 'x' if not isinstance(record, dict) or 'x' not in record else 'y'
      problem = f'user_data[{user!r}] has no key {key!r}'
    elif not isinstance(record['x'], list) or not isinstance(record['y'], list):
      problem = 'x and y must be lists of samples and of labels'
    elif len(record['x']) != len(record['y']):
      problem = (f'{len(record["x"])} x but {len(record["y"])} y entries; each sample needs '
                 'one label')
    elif num_samples is not None and num_samples[i] != len(record['y']):
      problem = (f'{len(record["y"])} samples where the shard\'s num_samples says '
                 f'{num_samples[i]!r}; the shard is damaged or was edited')
    if problem is None:
      out.append((user, record['x'], record['y']))
    else:
      problems[user] = problem
  return out, problems


class _Unreadable(ValueError):
  """A user's samples that cannot be read; the text names the first bad sample. `load_leaf`
  makes it a problem of that user, with the shard file."""


def _int_labels(ys: list) -> np.ndarray:
  """Integer labels (their range is the data check's)."""
  try:
    y = np.asarray(ys)
    if y.size and (y.dtype.kind not in 'iuf' or np.any(y != np.round(y))):
      raise ValueError
    return y.astype(np.int32)
  except (ValueError, TypeError, OverflowError):
    first = next((i for i, v in enumerate(ys)
                  if not isinstance(v, int) or isinstance(v, bool)), 0)
    raise _Unreadable(f'sample {first} has label {ys[first]!r}; labels are integers') from None


def _femnist(xs: list, ys: list) -> ClientArrays:
  try:
    x = np.asarray(xs, dtype=np.float32).reshape(len(xs), 784)
  except (ValueError, TypeError):
    first = next((i for i, row in enumerate(xs)
                  if not isinstance(row, list) or len(row) != 784), 0)
    raise _Unreadable(f'sample {first}: FEMNIST x rows must be 784 numbers each') from None
  return ClientArrays(x.reshape(-1, 28, 28), _int_labels(ys))


def _shakespeare(xs: list, ys: list, seq_length: int) -> ClientArrays:
  x = np.zeros((len(xs), seq_length), np.int32)
  y = np.zeros((len(ys),), np.int32)
  for i, (s, c) in enumerate(zip(xs, ys)):
    if not isinstance(s, str) or len(s) > seq_length:
      raise _Unreadable(f'sample {i}: x must be a string of at most {seq_length} characters '
                        '(seq_length)')
    if not isinstance(c, str) or len(c) != 1:
      raise _Unreadable(f'sample {i}: y must be one character, got {c!r}')
    if s:
      x[i, seq_length - len(s):] = text.encode_chars(s)  # Left-padded.
    y[i] = text.encode_chars(c)[0]
  return ClientArrays(x, y)


def _tweet_tokens(xs: list) -> List[List[str]]:
  out = []
  for i, row in enumerate(xs):
    if isinstance(row, str):
      tweet = row
    elif isinstance(row, list) and len(row) >= 5 and isinstance(row[4], str):
      tweet = row[4]
    else:
      raise _Unreadable(f'sample {i}: Sent140 x must be [tweet_id, date, query, user, text] '
                        'with text a string')
    out.append(text.tokenize_tweet(tweet))
  return out


def _sent140(token_lists: List[List[str]], ys: list, vocab: Dict[str, int],
             length: int) -> ClientArrays:
  x = np.zeros((len(token_lists), length), np.int32)
  for i, tokens in enumerate(token_lists):
    x[i] = text.words_to_ids(tokens, vocab, length)
  return ClientArrays(x, _int_labels(ys))


def load_leaf(path: str, task: str, split: str = 'all', max_clients: int = 0,
              seq_length: int = 80, words_per_tweet: int = text.WORDS_PER_TWEET,
              max_vocab_size: int = 0,
              glove_path: Optional[str] = None) -> FederatedDataset:
  """Loads a LEAF JSON dataset into a `FederatedDataset`.

  Args:
    path: a folder with `train/` and `test/` subfolders of *.json shards
      (LEAF's `data/` folder after `preprocess.sh -t sample`), or a folder of
      `all_data*.json` shards, or one LEAF JSON file.
    task: 'femnist', 'shakespeare' or 'sent140'.
    split: 'train', 'test' (need train/ and test/ subfolders) or 'all'
      (train then test per user; the only choice for all_data files).
    max_clients: > 0 keeps the first N user ids in sorted order.
    seq_length: Shakespeare characters per example (shorter x are left-padded).
    words_per_tweet: Sent140 word ids per tweet (pad/truncate).
    max_vocab_size: Sent140: > 0 keeps at most that many words in the
      vocabulary (most frequent in the loaded data, or the first words of the
      GloVe file); 0 keeps all.
    glove_path: Sent140: a GloVe text file; the vocabulary is then the GloVe
      words and `extras['embeddings']` the matrix (rows 0, 1 zero).

  Returns:
    `FederatedDataset` named after the task. femnist: x float32 [n, 28, 28],
    62 classes. shakespeare: x int32 [n, seq_length], 81 classes.
    sent140: x int32 [n, words_per_tweet], 2 classes, `extras['vocab']`
    (word -> id) and, with glove_path, `extras['embeddings']`.
  """
  if task not in TASKS:
    raise DataError(f'Unknown LEAF task {task!r}; expected one of {TASKS}.')
  if split not in _SPLITS:
    raise DataError(f'split must be one of {_SPLITS}, got {split!r}.')
  files = _json_files(path, split)
  raw: Dict[str, List[Tuple[str, list, list]]] = {}  # user -> [(file, x, y)]
  problems: Dict[str, Tuple[str, str]] = {}   # user -> (file, problem), for the data check
  for f in files:
    sound, found = _shard_users(f, _read_json(f))
    for user, xs, ys in sound:
      raw.setdefault(user, []).append((f, xs, ys))
    for user, problem in found.items():
      problems.setdefault(user, (f, problem))
  if not raw and not problems:
    raise DataError(f'No users in {files}. ' + _FIX)
  users = sorted(set(raw) | set(problems))
  if max_clients > 0:
    users = users[:max_clients]
  problems = {u: problems[u] for u in users if u in problems}
  users = [u for u in users if u not in problems]

  extras = {'files': files}
  tokens = {}
  if task == 'sent140':
    for u in users:
      parts = []
      for f, xs, _ in raw[u]:
        try:
          parts.append(_tweet_tokens(xs))
        except _Unreadable as e:
          problems[u] = (f, str(e))
          break
      tokens[u] = parts
    users = [u for u in users if u not in problems]
    if glove_path is not None:
      vocab, extras['embeddings'] = text.glove_vocab(glove_path,
                                                     max_vocab_size)
    else:
      vocab = text.build_vocab(
          (t for parts in tokens.values() for part in parts for t in part),
          max_vocab_size)
    extras['vocab'] = vocab
  num_classes, element_shape = {
      'femnist': (62, (28, 28)),
      'shakespeare': (text.NUM_CHAR_CLASSES, (seq_length,)),
      'sent140': (2, (words_per_tweet,)),
  }[task]

  x_range = (0.0, 1.0) if task == 'femnist' else None   # FEMNIST: 1.0 = background
  clients = {}
  for u in users:
    parts = []
    for j, (f, xs, ys) in enumerate(raw[u]):
      try:
        if task == 'femnist':
          part = _femnist(xs, ys)
        elif task == 'shakespeare':
          part = _shakespeare(xs, ys, seq_length)
        else:
          part = _sent140(tokens[u][j], ys, vocab, words_per_tweet)
        problem = checks.client_problem(part, element_shape, num_classes, x_range)
      except _Unreadable as e:
        problem = str(e)
      if problem is not None:   # named with this shard and the sample's place in it
        problems[u] = (f, problem.replace('example ', 'sample ', 1))
        break
      parts.append(part)
    if u not in problems:
      clients[u] = ClientArrays(np.concatenate([p.x for p in parts]),
                                np.concatenate([p.y for p in parts]))
  problems = {u: problems[u] for u in sorted(problems)}
  return FederatedDataset(
      name=task, clients=clients, num_classes=num_classes,
      element_shape=element_shape,
      description=f'LEAF {task} (split {split}) from {path}', extras=extras,
      source=path, x_range=x_range, problems=problems)
