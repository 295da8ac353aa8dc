"""Readers of the image files the centralized datasets come in: IDX (MNIST's) and CIFAR pickles.

Every reader checks what it reads and names the file and the fix in a
`DataError`: a bad magic number, a truncated file, trailing bytes, a corrupt
gzip stream, a pickle holding anything but arrays, labels out of range.
`images.load_centralized` finds the files; these read one each.
"""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import zlib
from typing import Tuple

import numpy as np

from tff_meta.data.types import DataError

_IDX_TYPES = {0x08: '>u1', 0x09: '>i1', 0x0B: '>i2', 0x0C: '>i4', 0x0D: '>f4', 0x0E: '>f8'}


def _read_maybe_gzip(path: str) -> bytes:
  try:
    with open(path, 'rb') as f:
      raw = f.read()
  except OSError as e:
    raise DataError(f'Cannot read {path!r}: {e.strerror}.') from e
  if raw[:2] == b'\x1f\x8b':
    try:
      return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
      raise DataError(f'{path}: corrupt or truncated gzip data ({e}); re-download the file.') from e
  return raw


def read_idx(path: str) -> np.ndarray:
  """Reads one IDX file (LeCun's MNIST format), gzipped or not.

  Layout: two zero bytes, a type byte (0x08 ubyte ... 0x0E double), the
  number of dimensions d, d big-endian uint32 sizes, then the data. A bad
  magic number, a truncated file or trailing bytes raise DataError naming
  the file.
  """
  raw = _read_maybe_gzip(path)
  if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
    raise DataError(
        f'{path}: bad IDX magic number 0x{raw[:4].hex() or "(empty)"}; an IDX file starts '
        'with 0x0000, a type byte 08-0E and the number of dimensions (images: 0x00000803, '
        'labels: 0x00000801). The file is not IDX or is corrupt; re-download it.')
  ndim = raw[3]
  header = 4 + 4 * ndim
  if len(raw) < header:
    raise DataError(f'{path}: truncated IDX header ({len(raw)} bytes, needs {header}); '
                    're-download the file.')
  dims = struct.unpack(f'>{ndim}I', raw[4:header])
  dtype = np.dtype(_IDX_TYPES[raw[2]])
  expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
  found = len(raw) - header
  if found != expected:
    problem = 'truncated' if found < expected else 'has trailing bytes'
    raise DataError(f'{path}: IDX data {problem}: shape {tuple(dims)} needs {expected} bytes '
                    f'after the header, found {found}; re-download the file.')
  data = np.frombuffer(raw, dtype=dtype, count=int(np.prod(dims, dtype=np.int64)),
                       offset=header)
  return data.reshape(dims).astype(dtype.newbyteorder('='))


class ArrayUnpickler(pickle.Unpickler):
  """Unpickles dicts, lists, bytes and numpy arrays only (what CIFAR batches hold)."""
  _ALLOWED = {('numpy.core.multiarray', '_reconstruct'), ('numpy._core.multiarray', '_reconstruct'),
              ('numpy', 'ndarray'), ('numpy', 'dtype'), ('_codecs', 'encode'),
              ('numpy.core.multiarray', 'scalar'), ('numpy._core.multiarray', 'scalar')}

  def find_class(self, module, name):
    if (module, name) in self._ALLOWED:
      return super().find_class(module, name)
    raise pickle.UnpicklingError(f'global {module}.{name} is not allowed in a CIFAR batch')


def read_cifar_batch(path: str, label_key: str, num_classes: int) -> Tuple[np.ndarray, np.ndarray]:
  """One CIFAR python pickle batch: x uint8 [n, 32, 32, 3], y int32 [n].

  The pickle is a dict with `data` (uint8 [n, 3072], rows = the red, green
  and blue 32x32 planes) and `labels` (CIFAR-10) or `fine_labels`
  (CIFAR-100); keys may be bytes (Python 2 pickles) or str.
  """
  raw = _read_maybe_gzip(path)
  try:
    batch = ArrayUnpickler(io.BytesIO(raw), encoding='bytes').load()
  except Exception as e:  # pickle raises many types on corrupt input.
    raise DataError(f'{path}: not a readable CIFAR python pickle batch ({type(e).__name__}: '
                    f'{e}); re-extract cifar-*-python.tar.gz.') from e
  if not isinstance(batch, dict):
    raise DataError(f'{path}: a CIFAR batch is a dict, found {type(batch).__name__}.')
  batch = {k.decode('latin-1') if isinstance(k, bytes) else k: v for k, v in batch.items()}
  for key in ('data', label_key):
    if key not in batch:
      raise DataError(f'{path}: CIFAR batch has no key {key!r} (keys: {sorted(batch)}); '
                      f'is this the right dataset (CIFAR-10 uses labels, CIFAR-100 fine_labels)?')
  data = np.asarray(batch['data'])
  if data.ndim != 2 or data.shape[1] != 3072:
    raise DataError(f'{path}: CIFAR data must be [n, 3072] (3 x 32 x 32), found {data.shape}.')
  try:
    y = np.asarray(batch[label_key], dtype=np.int64)
  except (TypeError, ValueError) as e:
    raise DataError(f'{path}: {label_key} are not integers.') from e
  if y.shape != (len(data),):
    raise DataError(f'{path}: {len(data)} images but {y.size} {label_key}.')
  check_labels(path, y, num_classes)
  x = data.astype(np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return x, y.astype(np.int32)


def check_labels(path: str, y: np.ndarray, num_classes: int) -> None:
  bad = (y < 0) | (y >= num_classes)
  if np.any(bad):
    raise DataError(f'{path}: label {y[bad][0]} at position {np.flatnonzero(bad)[0]} is outside '
                    f'[0, {num_classes}); the file is corrupt or of another dataset.')


# ---------------------------------------------------------------------------
# Finding the files.
