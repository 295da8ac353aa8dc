"""A program's first import: TensorFlow, without its start-up lines that are not news.

TensorFlow 2.14 on a CPU-only machine prints three `E ... Unable to register
cuDNN / cuFFT / cuBLAS factory` lines when it is imported, even with
`TF_CPP_MIN_LOG_LEVEL=2`. They are errors in name only (a plugin registered
twice; nothing fails), but a newcomer's first sight of every program was
three errors. `import_tensorflow` imports TensorFlow with the process's
stderr (file descriptor 2, where TensorFlow's C++ logging writes) sent to a
temporary file, then writes back every line but those (`BENIGN`), so any
other message still shows. Programs call it before anything imports
TensorFlow; TFF workers keep their own logs (`tff_worker_<port>.log`).
"""

import os
import sys
import tempfile

# Substrings of the start-up lines dropped: each says nothing about the run.
BENIGN = ('Unable to register cuDNN factory', 'Unable to register cuFFT factory',
          'Unable to register cuBLAS factory')


def filter_lines(text: str) -> str:
  """`text` without the lines that hold a `BENIGN` substring."""
  kept = [line for line in text.splitlines(keepends=True)
          if not any(b in line for b in BENIGN)]
  return ''.join(kept)


def import_tensorflow() -> None:
  """Sets TF_CPP_MIN_LOG_LEVEL=2 unless set, then imports TensorFlow with `BENIGN` lines
  dropped from what it prints. Does nothing more once TensorFlow is imported."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  if 'tensorflow' in sys.modules:
    return
  sys.stderr.flush()
  with tempfile.TemporaryFile() as captured:
    saved = os.dup(2)
    os.dup2(captured.fileno(), 2)
    try:
      import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    finally:   # stderr back, and what TensorFlow wrote, even if the import failed
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      text = filter_lines(captured.read().decode('utf-8', errors='replace'))
      if text:
        sys.stderr.write(text)
        sys.stderr.flush()
