"""Text encodings shared by the Shakespeare and Sent140 loaders.

Shakespeare (next-character prediction). The character vocabulary is LEAF's
80-character `ALL_LETTERS` string (LEAF `models/shakespeare` language utils),
in LEAF's order, shifted by one: id 0 is reserved for padding *and* for any
character outside the vocabulary, so characters have ids 1..80 and a model
predicting the next character has `NUM_CHAR_CLASSES = 81` outputs. Both the
TFF sqlite loader (`tff_native.load_shakespeare`) and the LEAF JSON loader
(`leaf.load_leaf(..., 'shakespeare')`) use this one vocabulary, so models and
checkpoints are interchangeable between the two sources. Every character of
TFF's `shakespeare.sqlite` and of the LEAF JSON files is in the vocabulary.

Sent140 (tweet sentiment, LEAF). Tweets are lowercased and split on runs of
non-word characters (`tokenize_tweet`); words map to ids through a vocabulary
where 0 = padding and 1 = unknown word (`build_vocab`, `words_to_ids`), and
word vectors can be read from a GloVe text file (`load_glove`, `glove_vocab`):
one word per line followed by its space-separated floats, as distributed at
https://nlp.stanford.edu/projects/glove/ (e.g. `glove.6B.300d.txt`).
"""

from __future__ import annotations

import collections
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.data.types import DataError

# LEAF's Shakespeare character set, in LEAF's order.
ALL_LETTERS = (
    "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
    'abcdefghijklmnopqrstuvwxyz}')
CHAR_PAD_ID = 0  # Padding and out-of-vocabulary characters.
NUM_CHAR_CLASSES = len(ALL_LETTERS) + 1  # 81
_CHAR_TO_ID = {c: i + 1 for i, c in enumerate(ALL_LETTERS)}

WORD_PAD_ID = 0
WORD_UNK_ID = 1
WORDS_PER_TWEET = 25
_NON_WORD = re.compile(r'\W+')


def encode_chars(text: str) -> np.ndarray:
  """Maps each character to its id in 1..80 (0 if not in `ALL_LETTERS`)."""
  return np.fromiter((_CHAR_TO_ID.get(c, CHAR_PAD_ID) for c in text),
                     dtype=np.int32, count=len(text))


def decode_chars(ids: Iterable[int]) -> str:
  """Inverse of `encode_chars`; padding/unknown ids are dropped."""
  return ''.join(ALL_LETTERS[i - 1] for i in ids if 0 < i <= len(ALL_LETTERS))


def char_windows(ids: np.ndarray, seq_length: int = 80,
                 stride: int = 1) -> Tuple[np.ndarray, np.ndarray]:
  """Next-character examples from one encoded text, as in LEAF's preprocessing.

  Windows of `seq_length` ids start every `stride` positions; the label is
  the id that follows the window, so a text of L >= seq_length + 1 ids gives
  ceil((L - seq_length) / stride) examples (stride 1: L - seq_length, exactly
  LEAF's count). A text with 2..seq_length ids is left-padded with
  `CHAR_PAD_ID` to seq_length + 1 and gives one example; texts with fewer
  than 2 ids give none.

  Returns:
    x int32 [n, seq_length], y int32 [n].
  """
  ids = np.asarray(ids, dtype=np.int32)
  if len(ids) < 2:
    return (np.zeros((0, seq_length), np.int32), np.zeros((0,), np.int32))
  if len(ids) < seq_length + 1:
    ids = np.concatenate(
        [np.full(seq_length + 1 - len(ids), CHAR_PAD_ID, np.int32), ids])
  windows = np.lib.stride_tricks.sliding_window_view(ids, seq_length + 1)
  windows = windows[::stride]
  return (np.ascontiguousarray(windows[:, :-1]),
          np.ascontiguousarray(windows[:, -1]))


def tokenize_tweet(text: str) -> List[str]:
  """Lowercases and splits on runs of non-word characters (`\\W+`)."""
  return [t for t in _NON_WORD.split(text.lower()) if t]


def build_vocab(token_lists: Iterable[Sequence[str]],
                max_size: int = 0) -> Dict[str, int]:
  """Word -> id, most frequent first (ties alphabetical), ids from 2.

  Ids 0 (`WORD_PAD_ID`) and 1 (`WORD_UNK_ID`) are reserved. `max_size` > 0
  keeps at most that many words (so ids < max_size + 2); 0 keeps all.
  """
  counts = collections.Counter()
  for tokens in token_lists:
    counts.update(tokens)
  words = sorted(counts, key=lambda w: (-counts[w], w))
  if max_size > 0:
    words = words[:max_size]
  return {w: i + 2 for i, w in enumerate(words)}


def words_to_ids(tokens: Sequence[str], vocab: Dict[str, int],
                 length: int = WORDS_PER_TWEET) -> np.ndarray:
  """int32 [length]: the first `length` tokens' ids, right-padded with 0.

  Words not in `vocab` map to `WORD_UNK_ID` (1).
  """
  out = np.full(length, WORD_PAD_ID, np.int32)
  for i, token in enumerate(tokens[:length]):
    out[i] = vocab.get(token, WORD_UNK_ID)
  return out


def _glove_lines(path: str):
  """Yields (line_number, word, vector) from a GloVe text file."""
  try:
    f = open(path, encoding='utf-8')
  except OSError as e:
    raise DataError(
        f'Cannot read GloVe file {path!r}: {e.strerror}. Download e.g. '
        'glove.6B.zip from https://nlp.stanford.edu/projects/glove/ and pass '
        'the path of one of its .txt files.') from e
  dim = None
  with f:
    for lineno, line in enumerate(f, start=1):
      line = line.rstrip('\n').rstrip('\r')
      if not line.strip():
        continue
      parts = line.rstrip(' ').split(' ')
      problem = None
      if len(parts) < 2:
        problem = 'expected a word followed by floats'
      elif dim is not None and len(parts) - 1 != dim:
        problem = (f'expected {dim} floats (as on the first line), '
                   f'found {len(parts) - 1}')
      else:
        try:
          vector = np.asarray(parts[1:], dtype=np.float32)
        except ValueError:
          problem = 'a value after the word is not a float'
      if problem:
        raise DataError(
            f'Malformed GloVe file {path!r}, line {lineno}: {problem} '
            f'(line starts {line[:40]!r}). Each line must be '
            '"word f1 f2 ... fd" separated by single spaces; re-download '
            'or fix the file.')
      dim = len(vector)
      yield lineno, parts[0], vector
  if dim is None:
    raise DataError(f'GloVe file {path!r} has no vectors (empty file).')


def load_glove(path: str, vocab: Dict[str, int]) -> np.ndarray:
  """float32 [vocab_size, dim] embedding matrix for `vocab` from a GloVe file.

  vocab_size = max id + 1 (at least 2). Row i is the GloVe vector of the word
  with id i; rows of padding, unknown and words missing from the file are 0.
  The first occurrence of a word in the file wins. Raises `DataError` naming
  the file and line number for a malformed line.
  """
  size = max([WORD_UNK_ID] + list(vocab.values())) + 1
  rows: Dict[int, np.ndarray] = {}
  dim = 0
  for _, word, vector in _glove_lines(path):
    dim = len(vector)
    i = vocab.get(word)
    if i is not None and i not in rows:
      rows[i] = vector
  matrix = np.zeros((size, dim), np.float32)
  for i, vector in rows.items():
    matrix[i] = vector
  return matrix


def glove_vocab(path: str,
                max_size: int = 0) -> Tuple[Dict[str, int], np.ndarray]:
  """A vocabulary made of the GloVe file's words, and its embedding matrix.

  Words keep the file's order (GloVe files are sorted by frequency) and get
  ids 2, 3, ...; `max_size` > 0 keeps only the first `max_size` words.
  Rows 0 (padding) and 1 (unknown) of the matrix are zero.
  """
  vocab: Dict[str, int] = {}
  vectors: List[np.ndarray] = []
  dim: Optional[int] = None
  for _, word, vector in _glove_lines(path):
    dim = len(vector)
    if max_size > 0 and len(vocab) >= max_size:
      break
    if word not in vocab:
      vocab[word] = len(vocab) + 2
      vectors.append(vector)
  matrix = np.zeros((len(vocab) + 2, dim), np.float32)
  if vectors:
    matrix[2:] = np.stack(vectors)
  return vocab, matrix
