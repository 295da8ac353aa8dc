"""MovieLens-100k in RecBole's atomic-file format, read into `movielens.load_movielens`'s tables.

RecBole (https://recbole.io/docs/user_guide/data/atomic_files.html) stores a
dataset as tab-separated "atomic files" whose first line names each column as
`name:type` (type token, token_seq, float or float_seq). Its ml-100k folder
(`ml-100k.inter`, `ml-100k.user`, `ml-100k.item`; RecBole's wheel on PyPI
ships it under `recbole/dataset_example/ml-100k/`) holds the same 100,000
ratings as GroupLens' u.data, u.user and u.item:

  <name>.inter  user_id:token  item_id:token  rating:float  timestamp:float
  <name>.user   user_id:token  age:token  gender:token  occupation:token  zip_code:token
  <name>.item   item_id:token  movie_title:token_seq  release_year:token  class:token_seq
                (class: the movie's genres, space-separated, GroupLens' genre names)

Columns are found by name, in any order; other columns are ignored. The
readers return what `movielens`'s GroupLens readers return, so both formats
load into the same `RatingsDataset` (occupation ids: the sorted occupations,
which is GroupLens' u.occupation order on ml-100k). A malformed line raises
DataError with file, line and fix.
"""

from __future__ import annotations

import glob
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.data.types import DataError

_FIX = ('Use RecBole\'s ml-100k atomic files (ml-100k.inter, ml-100k.user, ml-100k.item) '
        'unchanged, or GroupLens\' u.data, u.user and u.item.')
SUFFIXES = ('.inter', '.user', '.item')


def find(path: str) -> Optional[Dict[str, str]]:
  """{'.inter': file, '.user': file, '.item': file} of the one atomic dataset in folder `path`,
  or None when the folder holds no `.inter` file. DataError when it is ambiguous or incomplete."""
  inters = sorted(glob.glob(os.path.join(glob.escape(path), '*.inter')))
  if not inters:
    return None
  if len(inters) > 1:
    raise DataError(f'{path!r} holds {len(inters)} atomic rating files '
                    f'({", ".join(os.path.basename(f) for f in inters)}): keep one dataset per '
                    'folder, or point --data_path at the folder of the one you mean.')
  stem = inters[0][:-len('.inter')]
  files = {s: stem + s for s in SUFFIXES}
  missing = [os.path.basename(f) for f in files.values() if not os.path.isfile(f)]
  if missing:
    raise DataError(f'{path!r} has {os.path.basename(inters[0])} but not {missing}: the atomic '
                    'format needs the .inter, .user and .item files of one dataset. ' + _FIX)
  return files


def _table(path: str, required: Sequence[str]):
  """(column index by name, [(line number, fields)]) of an atomic file; `required` must exist."""
  rows: List[Tuple[int, List[str]]] = []
  try:
    with open(path, encoding='utf-8') as f:
      header = f.readline().rstrip('\r\n').split('\t')
      for lineno, line in enumerate(f, start=2):
        line = line.rstrip('\r\n')
        if line.strip():
          rows.append((lineno, line.split('\t')))
  except UnicodeDecodeError as e:
    raise DataError(f'{path}: not UTF-8 text ({e}). ' + _FIX) from e
  except OSError as e:
    raise DataError(f'Cannot read {path!r}: {e.strerror}.') from e
  columns = {h.split(':', 1)[0]: i for i, h in enumerate(header)}
  missing = [c for c in required if c not in columns]
  if missing:
    raise DataError(f'{path}: the header (line 1) has no column {missing} (found '
                    f'{header}); atomic files name each column as name:type. ' + _FIX)
  for lineno, fields in rows:
    if len(fields) != len(header):
      raise _fail(path, lineno, f'{len(fields)} tab-separated fields, the header has {len(header)}',
                  fields)
  if not rows:
    raise DataError(f'{path}: no rows after the header. ' + _FIX)
  return columns, rows


def _fail(path: str, lineno: int, problem: str, fields: List[str]) -> DataError:
  line = '\t'.join(fields)
  return DataError(f'{path}, line {lineno}: {problem} (line starts {line[:60]!r}). ' + _FIX)


def _number(path, lineno, fields, value, what, kind=int):
  try:
    number = float(value)
  except ValueError:
    raise _fail(path, lineno, f'{what} {value!r} is not a number', fields) from None
  if kind is int:
    if number != int(number):
      raise _fail(path, lineno, f'{what} {value!r} is not an integer', fields)
    return int(number)
  return number


def read_users(path: str, genders: Dict[str, int]):
  """({user id: (gender, age, occupation index)}, sorted occupations)."""
  col, rows = _table(path, ('user_id', 'age', 'gender', 'occupation'))
  raw = {}
  for lineno, f in rows:
    uid = _number(path, lineno, f, f[col['user_id']], 'user id')
    if uid in raw:
      raise _fail(path, lineno, f'user id {uid} appears twice', f)
    if f[col['gender']] not in genders:
      raise _fail(path, lineno, f'gender must be one of {sorted(genders)}, found '
                  f'{f[col["gender"]]!r}', f)
    raw[uid] = (genders[f[col['gender']]], _number(path, lineno, f, f[col['age']], 'age'),
                f[col['occupation']])
  occupations = tuple(sorted({r[2] for r in raw.values()}))
  index = {o: i for i, o in enumerate(occupations)}
  return {u: (g, a, index[o]) for u, (g, a, o) in raw.items()}, occupations


def read_items(path: str, genre_names: Sequence[str]):
  """({item id: genre flags float32 [len(genre_names)]}, {item id: title})."""
  col, rows = _table(path, ('item_id', 'class'))
  position = {g: i for i, g in enumerate(genre_names)}
  genres, titles = {}, {}
  for lineno, f in rows:
    iid = _number(path, lineno, f, f[col['item_id']], 'item id')
    if iid in genres:
      raise _fail(path, lineno, f'item id {iid} appears twice', f)
    flags = np.zeros(len(genre_names), np.float32)
    for g in f[col['class']].split():
      if g not in position:
        raise _fail(path, lineno, f'genre {g!r} is not one of ml-100k\'s {len(genre_names)} '
                    'genres', f)
      flags[position[g]] = 1.0
    genres[iid] = flags
    titles[iid] = f[col['movie_title']] if 'movie_title' in col else ''
  return genres, titles


def read_ratings(path: str, users, items) -> Dict[int, List[Tuple[int, int, float]]]:
  """{user id: [(timestamp, item, rating)]} in file order."""
  col, rows = _table(path, ('user_id', 'item_id', 'rating', 'timestamp'))
  out: Dict[int, list] = {}
  for lineno, f in rows:
    uid = _number(path, lineno, f, f[col['user_id']], 'user id')
    iid = _number(path, lineno, f, f[col['item_id']], 'item id')
    rating = _number(path, lineno, f, f[col['rating']], 'rating', float)
    ts = _number(path, lineno, f, f[col['timestamp']], 'timestamp')
    if not 1.0 <= rating <= 5.0:
      raise _fail(path, lineno, f'rating {f[col["rating"]]} is outside [1, 5]', f)
    if uid not in users:
      raise _fail(path, lineno, f'user id {uid} is not in the .user file', f)
    if iid not in items:
      raise _fail(path, lineno, f'item id {iid} is not in the .item file', f)
    out.setdefault(uid, []).append((ts, iid, rating))
  return out
