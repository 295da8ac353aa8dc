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
first.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Dict, List, Optional, Tuple

from absl import logging
import numpy as np

from tff_meta.data import text
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


def _read_json(path: str) -> dict:
  try:
    with open(path, encoding='utf-8') as f:
      data = json.load(f)
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


def _shard_users(path: str, data: dict) -> List[Tuple[str, list, list]]:
  """[(user, xs, ys)] of one shard, checked; num_samples is only warned on."""
  users, user_data = data['users'], data['user_data']
  num_samples = data.get('num_samples')
  if num_samples is None or len(num_samples) != len(users):
    logging.warning('%s: num_samples has %s entries for %d users.', path,
                    'no' if num_samples is None else len(num_samples),
                    len(users))
    num_samples = None
  out = []
  for i, user in enumerate(users):
    if user not in user_data:
      raise DataError(f'{path}: user {user!r} is listed in users but missing '
                      'from user_data. ' + _FIX)
    record = user_data[user]
    for key in ('x', 'y'):
      if not isinstance(record, dict) or key not in record:
        raise DataError(f'{path}: user_data[{user!r}] has no key {key!r}. '
                        + _FIX)
    xs, ys = record['x'], record['y']
    if len(xs) != len(ys):
      raise DataError(f'{path}: user {user!r} has {len(xs)} x but {len(ys)} '
                      'y entries; each sample needs one label. ' + _FIX)
    if num_samples is not None and num_samples[i] != len(ys):
      logging.warning('%s: num_samples says %s for user %r but it has %d '
                      'samples; using the samples.', path, num_samples[i],
                      user, len(ys))
    out.append((str(user), xs, ys))
  return out


def _int_labels(path: str, user: str, ys: list, num_classes: int) -> np.ndarray:
  try:
    y = np.asarray(ys)
    if y.size and (y.dtype.kind not in 'iuf' or np.any(y != np.round(y))):
      raise ValueError
    y = y.astype(np.int32)
  except (ValueError, TypeError):
    raise DataError(f'{path}: user {user!r} has non-integer labels y. '
                    + _FIX) from None
  bad = (y < 0) | (y >= num_classes)
  if np.any(bad):
    raise DataError(
        f'{path}: user {user!r} has label {y[bad][0]} outside '
        f'[0, {num_classes}); this file does not look like LEAF output for '
        'this task (wrong task name or corrupted file).')
  return y


def _femnist(path: str, user: str, xs: list, ys: list) -> ClientArrays:
  try:
    x = np.asarray(xs, dtype=np.float32).reshape(len(xs), 784)
  except (ValueError, TypeError):
    raise DataError(f'{path}: user {user!r}: FEMNIST x rows must be 784 '
                    'floats each. ' + _FIX) from None
  return ClientArrays(x.reshape(-1, 28, 28), _int_labels(path, user, ys, 62))


def _shakespeare(path: str, user: str, xs: list, ys: list,
                 seq_length: int) -> ClientArrays:
  x = np.zeros((len(xs), seq_length), np.int32)
  y = np.zeros((len(ys),), np.int32)
  for i, (s, c) in enumerate(zip(xs, ys)):
    if not isinstance(s, str) or len(s) > seq_length:
      raise DataError(f'{path}: user {user!r} sample {i}: x must be a string '
                      f'of at most {seq_length} characters (seq_length). '
                      + _FIX)
    if not isinstance(c, str) or len(c) != 1:
      raise DataError(f'{path}: user {user!r} sample {i}: y must be one '
                      f'character, got {c!r}. ' + _FIX)
    if s:
      x[i, seq_length - len(s):] = text.encode_chars(s)  # Left-padded.
    y[i] = text.encode_chars(c)[0]
  return ClientArrays(x, y)


def _tweet_tokens(path: str, user: str, xs: list) -> List[List[str]]:
  out = []
  for i, row in enumerate(xs):
    if isinstance(row, str):
      tweet = row
    elif isinstance(row, list) and len(row) >= 5 and isinstance(row[4], str):
      tweet = row[4]
    else:
      raise DataError(f'{path}: user {user!r} sample {i}: Sent140 x must be '
                      '[tweet_id, date, query, user, text] with text a '
                      'string. ' + _FIX)
    out.append(text.tokenize_tweet(tweet))
  return out


def _sent140(path: str, user: str, token_lists: List[List[str]], ys: list,
             vocab: Dict[str, int], length: int) -> ClientArrays:
  x = np.zeros((len(token_lists), length), np.int32)
  for i, tokens in enumerate(token_lists):
    x[i] = text.words_to_ids(tokens, vocab, length)
  return ClientArrays(x, _int_labels(path, user, ys, 2))


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
  for f in files:
    for user, xs, ys in _shard_users(f, _read_json(f)):
      raw.setdefault(user, []).append((f, xs, ys))
  if not raw:
    raise DataError(f'No users in {files}. ' + _FIX)
  users = sorted(raw)
  if max_clients > 0:
    users = users[:max_clients]

  extras = {'files': files}
  if task == 'sent140':
    tokens = {u: [_tweet_tokens(f, u, xs) for f, xs, _ in raw[u]]
              for u in users}
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

  clients = {}
  for u in users:
    parts = []
    for j, (f, xs, ys) in enumerate(raw[u]):
      if task == 'femnist':
        parts.append(_femnist(f, u, xs, ys))
      elif task == 'shakespeare':
        parts.append(_shakespeare(f, u, xs, ys, seq_length))
      else:
        parts.append(_sent140(f, u, tokens[u][j], ys, vocab, words_per_tweet))
    clients[u] = ClientArrays(np.concatenate([p.x for p in parts]),
                              np.concatenate([p.y for p in parts]))
  return FederatedDataset(
      name=task, clients=clients, num_classes=num_classes,
      element_shape=element_shape,
      description=f'LEAF {task} (split {split}) from {path}', extras=extras)
