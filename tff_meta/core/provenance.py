"""Which code wrote a run folder: one row per start or resume in `provenance.csv`.

A long run resumes across sessions, and a session may start it from a newer
checkout, so a run folder's numbers can come from more than one code
version. Every program that writes a run folder (training, few-round,
recommendation) calls `record` when it starts or resumes; the row gives the
UTC time, the code version (`code_version`), where the run started (the
checkpointed round it resumed after, 0 for a new run, blank when the program
does not say), the command line and the machine (`machine`: CPU model, count and
instruction-set flags, and the TensorFlow version; float results can differ in
their last digits between CPUs with different vector units).
The reports (`programs.report`, `programs.report`) list each
folder's versions, so docs/RESULTS.md can label its numbers with them.

This module imports neither TensorFlow nor TFF.
"""

from __future__ import annotations

import csv
import datetime
import functools
import hashlib
import importlib.metadata
import io
import os
import platform
import shlex
import subprocess
import sys
from typing import Dict, List, Optional

from tff_meta.core import files
from tff_meta.core.run_folder import PROVENANCE_FILE

FIELDS = ('time', 'code_version', 'start', 'command', 'machine')
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNKNOWN = 'unknown'   # not a git checkout, or git is missing


def _git(*args: str, checkout: Optional[str] = None) -> subprocess.CompletedProcess:
  return subprocess.run(['git', '-C', checkout or _REPO, *args], capture_output=True, text=True,
                        timeout=10, check=False)


@functools.lru_cache(maxsize=None)
def code_version(checkout: Optional[str] = None) -> str:
  """The commit of `checkout` (default: the checkout that holds this package; 12 hex digits),
  with `+dirty` when tracked files differ from it; `UNKNOWN` outside a git checkout."""
  try:
    head = _git('rev-parse', '--short=12', 'HEAD', checkout=checkout)
    if head.returncode != 0 or not head.stdout.strip():
      return UNKNOWN
    dirty = _git('diff', '--quiet', 'HEAD', '--', checkout=checkout).returncode == 1
  except (OSError, subprocess.SubprocessError):
    return UNKNOWN
  return head.stdout.strip() + ('+dirty' if dirty else '')


# The vector units TensorFlow's CPU kernels choose between; named in `machine()`.
_SIMD_FLAGS = ('sse4_2', 'avx', 'avx2', 'fma', 'avx512f', 'avx512_vnni', 'avx512_bf16', 'amx_tile')


def _cpuinfo(path: str) -> Dict[str, str]:
  """The first processor's `model name` and `flags` from /proc/cpuinfo ({} elsewhere)."""
  out: Dict[str, str] = {}
  try:
    with open(path, encoding='utf-8', errors='replace') as f:
      for line in f:
        key, _, value = line.partition(':')
        key = key.strip()
        if key in ('model name', 'flags') and key not in out:
          out[key] = value.strip()
        if len(out) == 2:
          break
  except OSError:
    pass
  return out


@functools.lru_cache(maxsize=None)
def machine(cpuinfo_path: str = '/proc/cpuinfo') -> str:
  """One line naming where a run ran, e.g. 'Intel(R) Xeon(R) Processor x2 (x86_64; avx avx2
  fma avx512f; flags 3f2a9c1e); tensorflow 2.14.1'. The hash covers every CPU flag, so two
  rows with the same hash ran on the same instruction set."""
  info = _cpuinfo(cpuinfo_path)
  flags = info.get('flags', '').split()
  cpu = f'{info.get("model name") or platform.processor() or UNKNOWN} x{os.cpu_count() or "?"}'
  simd = ' '.join(f for f in _SIMD_FLAGS if f in flags)
  digest = hashlib.sha1(' '.join(sorted(flags)).encode()).hexdigest()[:8] if flags else UNKNOWN
  try:
    tf = 'tensorflow ' + importlib.metadata.version('tensorflow')
  except importlib.metadata.PackageNotFoundError:
    tf = 'tensorflow not installed'
  return f'{cpu} ({platform.machine() or UNKNOWN}; {simd or "no SIMD flags read"}; flags {digest}); {tf}'


def record(folder: str, start: Optional[int] = None) -> None:
  """Appends this start's row to <folder>/provenance.csv (rewritten atomically: a stop
  mid-write leaves the previous rows)."""
  rows = read(folder)
  rows.append({'time': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'),
               'code_version': code_version(),
               'start': '' if start is None else str(start),
               'command': shlex.join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
               'machine': machine()})
  out = io.StringIO()
  writer = csv.DictWriter(out, FIELDS, lineterminator='\n')
  writer.writeheader()
  writer.writerows(rows)
  os.makedirs(folder, exist_ok=True)
  files.write_text(os.path.join(folder, PROVENANCE_FILE), out.getvalue())


def read(folder: str) -> List[Dict[str, str]]:
  """The rows of <folder>/provenance.csv, oldest first; [] without the file (a folder
  written before it existed) or when it cannot be read."""
  path = os.path.join(folder, PROVENANCE_FILE)
  try:
    with open(path, newline='', encoding='utf-8') as f:
      return [{k: row.get(k) or '' for k in FIELDS} for row in csv.DictReader(f)]
  except (OSError, csv.Error, UnicodeDecodeError):
    return []


def describe(folder: str) -> str:
  """'code 501558b9a1c2', or 'code a (from the start), b (after round 750)' for a run resumed
  by newer code; 'code not recorded' for a folder without provenance.csv, and 'code unknown'
  when the file is there but holds no readable row (damaged: the report says so)."""
  rows = read(folder)
  if not rows:
    if os.path.exists(os.path.join(folder, PROVENANCE_FILE)):
      return f'code unknown ({PROVENANCE_FILE} has no readable row)'
    return 'code not recorded'
  first: Dict[str, str] = {}
  for row in rows:
    first.setdefault(row['code_version'], row['start'])
  if len(first) == 1:
    return f'code {next(iter(first))}'
  return 'code ' + ', '.join(
      f'{v} ({"after round " + s if s not in ("", "0") else "from the start"})'
      for v, s in first.items())
