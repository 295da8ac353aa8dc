"""Atomic file writes: a killed program never leaves a half-written output behind.

Each write goes to a temporary file in the same folder, is flushed to disk,
and then replaces the target with `os.replace` (atomic on POSIX), so a
reader sees the old file or the new one, never a mix.

`claim_folder` keeps two programs from writing one output folder at once
(say, the same resume command started twice): the first holds an exclusive
`flock` on the folder's `.lock` file until it exits (the kernel drops it
however the process ends, SIGKILL included); the second stops with one
line naming the first's PID.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
from typing import IO, Dict, Iterator, List, Union


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


LOCK_FILE = '.lock'
_claimed: Dict[str, int] = {}   # real path of a claimed folder -> its open lock file's fd


def claim_folder(path: Union[str, os.PathLike]) -> None:
  """Creates the folder `path` if missing and locks it for this process until it exits.

  Raises OSError(EBUSY) naming the holder's PID when another process holds the lock.
  Claiming a folder this process already holds is a no-op.
  """
  require_folder(path)
  os.makedirs(path, exist_ok=True)
  real = os.path.realpath(path)
  if real in _claimed:
    return
  fd = os.open(os.path.join(real, LOCK_FILE), os.O_RDWR | os.O_CREAT, _FILE_MODE)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    holder = os.pread(fd, 64, 0).decode(errors='replace').strip() or 'unknown'
    os.close(fd)
    raise OSError(errno.EBUSY, f'another run (PID {holder}) is writing this output folder',
                  os.fspath(path)) from None
  os.ftruncate(fd, 0)
  os.pwrite(fd, f'{os.getpid()}\n'.encode(), 0)
  _claimed[real] = fd   # held open, so locked, for the life of the process


def claimed_folders() -> List[str]:
  """The output folders this process has claimed (`claim_folder`), in order: where its writes
  go, named by errors of the disk that carry no path of their own."""
  return list(_claimed)


def save_figure(fig, path: Union[str, os.PathLike], **kwargs) -> None:
  """`fig.savefig(path)` through a temporary file (the format follows the extension)."""
  with atomic_open(path, 'wb') as f:
    fig.savefig(f, format=os.path.splitext(os.fspath(path))[1][1:] or 'png', **kwargs)
