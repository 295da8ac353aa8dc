"""How every program ends: a one-line `error: ...` for the user's mistakes, never a traceback.

`run(main, user_errors)` replaces `absl.app.run(main)` in each program. It
also holds every program's prologue, so `main` starts with its own work:
stray positional arguments are refused (below), and TF's INFO chatter is
quieted (`logs.quiet`) before `main` runs. It ends the program this way:

- a user error (a type in `user_errors`: bad config, data, checkpoint, name)
  prints `error: <message>` (one line: it names the file and the fix) and
  exits 1 (or `exit_code(error)`, e.g. 3 for a lost worker);
- a file-system error (`OSError`: missing path, a file where a folder is
  expected, an unwritable folder, a full disk) prints the path, the reason and
  what to check, exit 1;
- a failure of the machine that reaches here as another type prints what it
  is, the folder and the fix, exit 1 (`environment_error`): a full disk, a
  read-only folder or a missing permission that TensorFlow reports as its own
  error (`ResourceExhaustedError: <path>; No space left on device` while a
  checkpoint is saved), or memory that ran out (`MemoryError`, TensorFlow's
  "OOM when allocating"); found in the error or in the ones it wraps;
- a bad flag (unknown flag, a value of the wrong type, a missing required
  flag, stray arguments) prints `error: <absl's message>`, exit 1;
- Ctrl-C prints `error: interrupted` with how to resume, exit 130; SIGTERM
  (a scheduler, `timeout`, `kill`) prints `error: terminated (SIGTERM)` with
  the same hint, exit 143 (runtime.workers stops the TFF workers first, and an
  error a stopped worker causes on the way out is reported as the termination). If
  the normal exit has not ended the process within TERM_GRACE_S seconds (a
  TFF call left in flight can leave a thread that interpreter shutdown waits
  on forever), it ends with `os._exit(143)`;
- an exception that ends a helper thread (`threading.excepthook`) reaches the
  main thread (as a KeyboardInterrupt there, raised by THREAD_ERROR_SIGNAL's
  handler, so that it arrives in a program started with SIGINT ignored, as a
  shell's background jobs are; or when `main` returns) and ends the program as
  if `main` had raised it: one `error:` line, once, no traceback. gRPC's
  "Cannot monitor channel state: Channel closed!" from its connectivity
  poller racing a channel's close is no error and is dropped
  (runtime.workers closes channels after the poller stops; this covers the
  rest). If the main thread does not come back from a call within
  TERM_GRACE_S, the helper ends the process with the same line and exit code
  (`ending` maps an error to both, for either path);
- anything else is a bug in this project, not in the input: the program
  prints `error: internal error (<type>: <message>)` and where the full
  traceback was saved, and exits 70 (EX_SOFTWARE). Developers see the
  traceback itself with TFF_META_TRACEBACK=1. So an unforeseen bad input can
  still never show a user a traceback, and a real bug is never silent: it
  has its own exit code, a message that says "internal error", and a file.

No TensorFlow here: `programs.report` uses this without loading it.
"""

from __future__ import annotations

import _thread
import errno
import functools
import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import Callable, NoReturn, Optional, Tuple, Type

from absl import app, flags

from tff_meta.core import files, logs

INTERNAL_ERROR_EXIT_CODE = 70   # EX_SOFTWARE (sysexits.h)
INTERRUPTED_EXIT_CODE = 130     # 128 + SIGINT, as shells report Ctrl-C
TERMINATED_EXIT_CODE = 128 + signal.SIGTERM
TERM_GRACE_S = 10.0
RESUME_HINT = ('Rerunning the same command resumes from the last checkpoint (where the program '
               'keeps checkpoints).')
TRACEBACK_ENV = 'TFF_META_TRACEBACK'
MAX_MESSAGE_CHARS = 600

_OS_HINTS = {
    errno.ENOENT: 'check the path',
    errno.ENOTDIR: 'a file is where a folder is expected; move it or choose another path',
    errno.EISDIR: 'it is a folder; give a file',
    errno.EEXIST: 'something is in the way there; move it or choose another path',
    errno.EACCES: 'it is not accessible; choose a path you can write',
    errno.EPERM: 'it is not accessible; choose a path you can write',
    errno.EROFS: 'the file system is read-only; choose another path',
    errno.ENOSPC: 'the disk is full; free space or choose another path',
    errno.ENAMETOOLONG: 'the name is too long; choose a shorter path',
    errno.EBUSY: ('wait for it to end (the same command then resumes where it stopped) or give '
                  'another output folder'),
}


def one_line(message: object) -> str:
  """`message` on one line (newlines and runs of spaces collapsed), at most MAX_MESSAGE_CHARS."""
  text = re.sub(r'\s+', ' ', str(message)).strip()
  return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 3] + '...'


# Set as a SIGTERM's handling starts (runtime.workers' handler, which stops the TFF workers
# before this module's runs, sets it first). An error those stopped workers then cause on the
# way out (a call that lost its worker) is reported as the termination it is, once.
TERMINATING = threading.Event()
_TERMINATION_REPORTED = threading.Event()
_REPORTED = threading.Event()   # an `error:` line was printed
_REPORTED_CODE: list = [1]      # and the exit code it ends with
_THREAD_ERRORS: list = []       # the first exception that ended a helper thread
_PROGRAM_ERRORS: list = [(), lambda e: 1]   # the running program's user errors and exit_code
THREAD_ERROR_SIGNAL = signal.SIGUSR1   # how a helper thread's error interrupts the main thread


def fail(message: object, code: int = 1) -> NoReturn:
  """Prints `error: <message>` on one line to stderr and exits with `code`; after a
  SIGTERM (`TERMINATING`), `error: terminated (SIGTERM)` and its exit code instead."""
  if TERMINATING.is_set():
    if _TERMINATION_REPORTED.is_set():
      sys.exit(TERMINATED_EXIT_CODE)
    _TERMINATION_REPORTED.set()
    message, code = f'terminated (SIGTERM). {RESUME_HINT}', TERMINATED_EXIT_CODE
  _REPORTED_CODE[:] = [code]
  _REPORTED.set()
  print(f'error: {one_line(message)}', file=sys.stderr, flush=True)
  sys.exit(code)


def describe_os_error(error: OSError) -> str:
  """'<path>: <reason>; <what to check>' for a file-system error."""
  paths = [p for p in (error.filename, getattr(error, 'filename2', None)) if p]
  where = ' -> '.join(os.fsdecode(p) for p in paths)
  reason = error.strerror or str(error)
  hint = _OS_HINTS.get(error.errno, 'check the path and that you can write there')
  return f'{where}: {reason}; {hint}.' if where else f'{reason}; {hint}.'


# Failures of the machine, not of the program or its input, by errno: their text (as
# os.strerror gives it, which TensorFlow's file errors quote after the path) and the fix.
_ENVIRONMENT = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
_RESUME_ELSEWHERE = ('then rerun the same command: it resumes from the last checkpoint (or copy '
                     'the output folder to a disk with room and rerun with --output_dir there)')
_PERMISSION = ('you lack the permission; fix the permissions of that path, or (to write) give '
               'an --output_dir you can write')
_ENVIRONMENT_FIX = {
    errno.ENOSPC: f'the disk is full; free space, {_RESUME_ELSEWHERE}',
    errno.EDQUOT: f'your disk quota is used up; free space, {_RESUME_ELSEWHERE}',
    errno.EROFS: 'the file system is read-only; give an --output_dir on a writable disk',
    errno.EACCES: _PERMISSION,
    errno.EPERM: _PERMISSION,
}
_MEMORY = re.compile(r'\bOOM when allocating|out of memory|std::bad_alloc|'
                     + re.escape(os.strerror(errno.ENOMEM)), re.IGNORECASE)
_MEMORY_FIX = ('the run needs more memory than this machine (or its limit) gives; lower what one '
               'call holds (--max_concurrent_calls, clients_per_round, a smaller model) or run '
               'on a machine with more memory. ' + RESUME_HINT)


def _chain(error: BaseException):
  """`error` and the errors it wraps (__cause__, __context__), each once."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    yield error
    error = error.__cause__ or error.__context__


def _where(path: str = '') -> str:
  """'<path> (output folder <f>)', or, when the error names no path, the output folder the
  program claimed last (the one it is writing)."""
  folders = files.claimed_folders()
  if path:
    real = os.path.realpath(path)
    inside = [f for f in folders if real.startswith(f + os.sep)]
    return f'{path} (output folder {inside[-1]})' if inside else path
  return f'output folder {folders[-1]}' if folders else ''


def environment_error(error: BaseException) -> Optional[str]:
  """One line for a failure of the machine found in `error` or the errors it wraps (a full
  disk, a read-only folder, a missing permission, memory that ran out), whatever type carries
  it; None for anything else. It names the path (or the output folder) and the fix."""
  for e in _chain(error):
    if isinstance(e, MemoryError) or _MEMORY.search(str(e)):
      where = _where()
      return (f'out of memory ({type(e).__name__}: {str(e)[:200] or "no details"})'
              f'{f" in the run of {where}" if where else ""}; {_MEMORY_FIX}')
    if isinstance(e, OSError) and e.errno in _ENVIRONMENT:
      path = os.fsdecode(e.filename) if e.filename else ''
      return f'{_where(path) or "writing"}: {e.strerror or e}; {_ENVIRONMENT_FIX[e.errno]}.'
    text = str(e)
    for code in _ENVIRONMENT:
      reason = os.strerror(code)
      if reason in text:   # TensorFlow: '... <path>; No space left on device [Op:...]'
        quoted = re.search(r'(/[^\s;]*)\s*;\s*' + re.escape(reason), text)
        where = _where(quoted.group(1) if quoted else '') or 'writing'
        return (f'{where}: {reason} ({type(e).__name__}); {_ENVIRONMENT_FIX[code]}.')
  return None


def _internal_error_message(error: BaseException) -> str:
  """The line for a bug: what was raised, and where its traceback is (a file, or stderr)."""
  text = ''.join(traceback.format_exception(error))
  if os.environ.get(TRACEBACK_ENV, '').strip() not in ('', '0'):
    print(text, file=sys.stderr, flush=True)
    saved = 'printed above'
  else:
    try:
      fd, path = tempfile.mkstemp(prefix=f'tff_meta_error_{time.strftime("%Y%m%d_%H%M%S")}_',
                                  suffix='.txt')
      with os.fdopen(fd, 'w') as f:
        f.write(' '.join(sys.argv) + '\n\n' + text)
      saved = f'saved in {path}'
    except OSError:
      print(text, file=sys.stderr, flush=True)
      saved = 'printed above'
  return (f'internal error ({type(error).__name__}: {error}). This is a bug in tff_meta, not in '
          f'your input as far as it can tell; please report it with the traceback ({saved}; '
          f'{TRACEBACK_ENV}=1 prints it).')


def ending(error: BaseException) -> Tuple[str, int]:
  """The `error:` line and exit code that `error` ends the running program with, as the
  module docstring says; the one mapping both the main thread and `_end_from_thread` use."""
  user_errors, exit_code = _PROGRAM_ERRORS
  if isinstance(error, user_errors):
    return str(error), exit_code(error)
  if isinstance(error, app.UsageError):
    return f'{error} (--helpshort lists the flags).', 1
  if isinstance(error, OSError):
    return environment_error(error) or describe_os_error(error), 1
  if isinstance(error, KeyboardInterrupt):
    return f'interrupted. {RESUME_HINT}', INTERRUPTED_EXIT_CODE
  message = environment_error(error)
  if message is not None:
    return message, 1
  return _internal_error_message(error), INTERNAL_ERROR_EXIT_CODE


def _closed_channel_noise(error: BaseException) -> bool:
  """gRPC's connectivity poller finding its channel closed under it: no error of the run."""
  return isinstance(error, ValueError) and 'Channel closed' in str(error)


def _thread_excepthook(args) -> None:
  """An exception that ended a helper thread: kept, and raised to the main thread."""
  error = args.exc_value
  if (args.exc_type is SystemExit or error is None or _closed_channel_noise(error)
      or TERMINATING.is_set() or _THREAD_ERRORS):
    return
  _THREAD_ERRORS.append(error)
  # A KeyboardInterrupt in the main thread, which reports `error`. Through a signal of its
  # own: a program started in the background of a shell has SIGINT ignored, and
  # `interrupt_main()` does nothing for an ignored signal.
  handled = signal.getsignal(THREAD_ERROR_SIGNAL) is _interrupt_main_thread
  _thread.interrupt_main(THREAD_ERROR_SIGNAL if handled else signal.SIGINT)
  timer = threading.Timer(TERM_GRACE_S, _end_from_thread, (error,))
  timer.daemon = True
  timer.start()


def _interrupt_main_thread(signum, frame) -> None:
  """THREAD_ERROR_SIGNAL's handler: a helper thread's error ends `main` (a stray SIGUSR1
  from outside, with no such error, is ignored)."""
  del signum, frame
  if _THREAD_ERRORS:
    raise KeyboardInterrupt


def _end_from_thread(error: BaseException) -> None:
  """The main thread did not report a helper thread's error in time (it is inside a call
  that does not return): print the line it would have printed, and end with its code."""
  if _REPORTED.is_set():   # the main thread printed its line and is on its way out
    os._exit(_REPORTED_CODE[0])  # pylint: disable=protected-access
  _REPORTED.set()
  message, code = ending(error)
  print(f'error: {one_line(message)}', file=sys.stderr, flush=True)
  os._exit(code)  # pylint: disable=protected-access


def guard(main: Callable, user_errors: Tuple[Type[BaseException], ...] = (),
          exit_code: Callable[[BaseException], int] = lambda e: 1) -> Callable:
  """`main` after the programs' prologue (no stray arguments, quiet logs), with every
  way it can end mapped as the module docstring says (`ending`)."""
  def report(e: BaseException) -> NoReturn:
    fail(*ending(e))

  @functools.wraps(main)
  def guarded(argv):
    _REPORTED.clear()
    del _THREAD_ERRORS[:]
    _PROGRAM_ERRORS[:] = [user_errors, exit_code]
    try:
      if len(argv) > 1:
        raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
      logs.quiet()
      result = main(argv)
    except SystemExit:
      if _THREAD_ERRORS and not _REPORTED.is_set():
        report(_THREAD_ERRORS[0])
      raise
    except (Exception, KeyboardInterrupt) as e:  # pylint: disable=broad-except
      report(_THREAD_ERRORS[0] if _THREAD_ERRORS and isinstance(e, KeyboardInterrupt) else e)
    if _THREAD_ERRORS:
      report(_THREAD_ERRORS[0])
    return result
  return guarded


def parse_flags(argv):
  """absl's flag parsing, with its errors as one `error:` line instead of `FATAL ...`."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(f'{e} (--helpshort lists the flags).')


def _on_sigterm(signum, frame) -> NoReturn:
  del frame
  del signum   # installed for SIGTERM only
  TERMINATING.set()
  timer = threading.Timer(TERM_GRACE_S, os._exit, (TERMINATED_EXIT_CODE,))  # pylint: disable=protected-access
  timer.daemon = True   # runs while interpreter shutdown waits for the other threads
  timer.start()
  fail(f'terminated (SIGTERM). {RESUME_HINT}', TERMINATED_EXIT_CODE)


def run(main: Callable, user_errors: Tuple[Type[BaseException], ...] = (),
        exit_code: Callable[[BaseException], int] = lambda e: 1) -> None:
  """`absl.app.run(main)`, ending as the module docstring says."""
  if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(THREAD_ERROR_SIGNAL, _interrupt_main_thread)
  threading.excepthook = _thread_excepthook
  app.run(guard(main, user_errors, exit_code), flags_parser=parse_flags)


def print_report(result: dict, output_dir: str) -> None:
  """What the report programs print from their `build(...)`: notes on stderr, the Markdown, then
  'Read N run folder(s). Wrote to DIR: files' (keys 'notes', 'markdown', 'runs', 'files')."""
  for n in result['notes']:
    print(f'note: {n}', file=sys.stderr)
  print(result['markdown'])
  names = ', '.join(os.path.basename(f) for f in result['files'])
  print(f"Read {result['runs']} run folder(s). Wrote to {output_dir}: {names}")
