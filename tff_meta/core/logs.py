"""Quiet, readable program logs: warnings and our own messages, not TF's INFO chatter."""

import logging as py_logging
import os
import sys

from absl import flags, logging


def quiet() -> None:
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  if not flags.FLAGS.is_parsed() or not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
  py_logging.getLogger('tensorflow').setLevel(py_logging.ERROR)
  py_logging.getLogger('matplotlib').setLevel(py_logging.WARNING)


def note(message: str) -> None:
  """A one-line note on stderr (once per message per process)."""
  if message not in _NOTED:
    _NOTED.add(message)
    print(f'note: {message}', file=sys.stderr)


_NOTED = set()
