"""Atomic file writes: a killed program never leaves a half-written output behind.

Each write goes to a temporary file in the same folder, is flushed to disk,
and then replaces the target with `os.replace` (atomic on POSIX), so a
reader sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from typing import IO, Iterator, Union


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


_FILE_MODE = 0o666 & ~_umask()   # what open() would give; mkstemp alone gives 0o600


@contextlib.contextmanager
def atomic_open(path: Union[str, os.PathLike], mode: str = 'w', **kwargs) -> Iterator[IO]:
  """Like `open(path, mode)` for writing ('w' or 'wb'), but the file appears only on success."""
  if mode not in ('w', 'wb'):
    raise ValueError(f'atomic_open writes whole files (mode "w" or "wb"), not {mode!r}.')
  path = os.fspath(path)
  folder = os.path.dirname(path) or '.'
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=f'.{os.path.basename(path)}.', suffix='.tmp')
  try:
    os.chmod(tmp, _FILE_MODE)
    with os.fdopen(fd, mode, **kwargs) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


def write_text(path: Union[str, os.PathLike], text: str) -> None:
  with atomic_open(path, 'w') as f:
    f.write(text)


def write_json(path: Union[str, os.PathLike], value, **kwargs) -> None:
  with atomic_open(path, 'w') as f:
    json.dump(value, f, **kwargs)


def require_folder(path: Union[str, os.PathLike]) -> None:
  """NotADirectoryError naming `path` if it exists but is not a folder (check before writing)."""
  if os.path.exists(path) and not os.path.isdir(path):
    raise NotADirectoryError(errno.ENOTDIR, 'is a file, not an output folder', os.fspath(path))


def save_figure(fig, path: Union[str, os.PathLike], **kwargs) -> None:
  """`fig.savefig(path)` through a temporary file (the format follows the extension)."""
  with atomic_open(path, 'wb') as f:
    fig.savefig(f, format=os.path.splitext(os.fspath(path))[1][1:] or 'png', **kwargs)
