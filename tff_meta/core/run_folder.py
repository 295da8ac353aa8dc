"""A run folder: the names of its files, and how to read a finished one.

The training loop (`classification/training_loop.py`, `core/checkpoints.py`,
`classification/experiment.py`) writes a run into one folder:

- `config.toml` (CONFIG_FILE): the resolved config;
- `metrics.csv` (METRICS_FILE): per round, training metrics, bytes down and
  up, `client_flops`, seconds, the local workers' memory (`worker_rss_mb`);
- `eval.csv` (EVAL_FILE): the evaluations, every `eval_every` rounds;
- `results.json` (RESULTS_FILE): the summary, the evaluation history and the
  final per-client test accuracies; written last, so a folder without it is a
  run still going (or killed);
- `provenance.csv` (PROVENANCE_FILE): one row per start or resume, with the
  code version that ran it (`tff_meta/core/provenance.py`);
- `checkpoints/`, `tensorboard/` (with `tensorboard/eval/`) and, for
  algorithms with client state, `client_states/`.

Few-round learning (`fewround/experiment.py`, `fewround/training.py`) and
recommendation (`recommendation/experiment.py`, `recommendation/loop.py`)
write their folders under the same names, plus the few of their own below.
The writers take the names from here and so does the reader below
(`load_run`, `find_run_folders`), which `tff_meta.analysis` builds its reports
on. This module imports neither TensorFlow nor TFF, so the analysis stays
light.

Resuming into a folder (`claim_for_resume`, called by the three writers)
first compares the settings with the folder's saved config.toml: a setting
that changes what is computed and differs stops the run with one error line
naming each key (old -> new) before anything in the folder changes. Each
config module declares the keys that only change how a run executes
(`EXECUTION_ONLY` next to its dataclass); every other key, a new one
included, must be equal.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import tomllib
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np



CONFIG_FILE = 'config.toml'
METRICS_FILE = 'metrics.csv'
EVAL_FILE = 'eval.csv'
RESULTS_FILE = 'results.json'
PROVENANCE_FILE = 'provenance.csv'
CHECKPOINTS_DIR = 'checkpoints'
TENSORBOARD_DIR = 'tensorboard'
TENSORBOARD_EVAL_DIR = os.path.join(TENSORBOARD_DIR, 'eval')
CLIENT_STATES_DIR = 'client_states'
PRETRAIN_DIR = 'pretrain'           # few-round: the FedAvg pre-training stage's sub-folder
# Few-round and recommendation folders use the names above for the same files, and:
RESULTS_TABLE_FILE = 'results.md'   # few-round: the results table
TABLE_FILE = 'table.md'             # recommendation: the results table (Tables 3, 5 and 6)
CURVE_FILE = 'curve.csv'            # recommendation: a trained method's evaluation curve
CURVE_PLOT_FILE = 'curve.png'       # recommendation: the curves plotted (Chen et al. Fig. 2)

# Folders inside a run folder that hold no runs (skipped by find_run_folders).
_SKIP_DIRS = frozenset({CHECKPOINTS_DIR, TENSORBOARD_DIR})
_REQUIRED_CONFIG = ('algorithm', 'dataset', 'model', 'support_fraction', 'seed')


class RunFolderError(ValueError):
  """A run folder or flag that cannot be used; the message names the folder and file."""


@dataclasses.dataclass(frozen=True, order=True)
class Setting:
  """What a run was trained and tested on: the config's dataset, model and support fraction."""
  dataset: str
  model: str
  support_fraction: float

  @property
  def label(self) -> str:
    return f'{self.dataset}, {self.model}, p={100 * self.support_fraction:g}%'


@dataclasses.dataclass
class Run:
  """One finished run folder, read and checked."""
  path: str
  config: Dict[str, Any]
  summary: Dict[str, Any]
  history: List[Dict[str, float]]     # evaluation rows, by round: round, test_accuracy, ...
  client_accuracies: np.ndarray       # final per-client test accuracy (fractions)
  cum_bytes: np.ndarray               # cum_bytes[r - 1]: bytes down + up of rounds 1..r
  cum_flops: Optional[np.ndarray]     # the same for client_flops (NaN from a missing value on)

  @property
  def method(self) -> str:
    return str(self.summary['method'])

  @property
  def algorithm(self) -> str:
    return str(self.config['algorithm'])

  @property
  def seed(self) -> int:
    return int(self.config['seed'])

  @property
  def setting(self) -> Setting:
    return Setting(str(self.config['dataset']), str(self.config['model']),
                   float(self.config['support_fraction']))

  @property
  def has_flops(self) -> bool:
    return self.cum_flops is not None

  def cost_at(self, round_num: int) -> Tuple[float, Optional[float]]:
    """Cumulative (bytes, FLOPs) of rounds 1..round_num; FLOPs None when not recorded."""
    r = int(round_num)
    if r <= 0:
      return 0.0, (0.0 if self.has_flops else None)
    flops = None
    if self.cum_flops is not None and np.isfinite(self.cum_flops[r - 1]):
      flops = float(self.cum_flops[r - 1])
    return float(self.cum_bytes[r - 1]), flops

  def first_round_reaching(self, target: float) -> Optional[int]:
    """The first evaluation round whose test accuracy is >= target (a fraction)."""
    for h in self.history:
      if h.get('test_accuracy', float('nan')) >= target - 1e-9:
        return int(h['round'])
    return None


def _folder_error(folder: str, name: str, what: str) -> RunFolderError:
  return RunFolderError(f'run folder {folder}: {name}: {what}')


def read_config(folder: str) -> Dict[str, Any]:
  """The folder's config.toml, with the keys a report needs checked."""
  path = os.path.join(folder, CONFIG_FILE)
  try:
    with open(path, 'rb') as f:
      cfg = tomllib.load(f)
  except PermissionError:   # the machine's refusal, named as such by cli.guard
    raise
  except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
    raise _folder_error(folder, CONFIG_FILE, f'cannot be read as TOML ({e})') from None
  missing = [k for k in _REQUIRED_CONFIG if k not in cfg]
  if missing:
    raise _folder_error(folder, CONFIG_FILE, f'has no {", ".join(missing)}')
  try:
    float(cfg['support_fraction']), int(cfg['seed'])
  except (TypeError, ValueError):
    raise _folder_error(folder, CONFIG_FILE, 'support_fraction and seed must be numbers') from None
  return cfg


def read_results(folder: str):
  """(summary, history sorted by round, per-client test accuracies) from results.json."""
  path = os.path.join(folder, RESULTS_FILE)
  try:
    with open(path) as f:
      res = json.load(f)
  except PermissionError:   # the machine's refusal, named as such by cli.guard
    raise
  except (OSError, ValueError) as e:   # json.JSONDecodeError is a ValueError
    raise _folder_error(folder, RESULTS_FILE, f'cannot be read as JSON ({e})') from None
  if not isinstance(res, dict):
    raise _folder_error(folder, RESULTS_FILE, 'is not a JSON object')
  summary, history = res.get('summary'), res.get('history')
  clients = res.get('test_client_accuracies')
  if not isinstance(summary, dict) or 'method' not in summary or 'accuracy' not in summary:
    raise _folder_error(folder, RESULTS_FILE, "has no summary with 'method' and 'accuracy'")
  if not isinstance(history, list) or not all(
      isinstance(h, dict) and 'round' in h and 'test_accuracy' in h for h in history):
    raise _folder_error(folder, RESULTS_FILE,
                        "has no 'history' list of rows with 'round' and 'test_accuracy'")
  if not isinstance(clients, list) or not clients:
    raise _folder_error(folder, RESULTS_FILE, "has no 'test_client_accuracies' list")
  try:
    history = sorted(({k: float(v) for k, v in h.items()} for h in history),
                     key=lambda h: h['round'])
    clients = np.asarray(clients, np.float64)
    float(summary['accuracy'])
  except (TypeError, ValueError):
    raise _folder_error(folder, RESULTS_FILE, 'holds a value that is not a number') from None
  if clients.ndim != 1 or not np.isfinite(clients).any():
    raise _folder_error(folder, RESULTS_FILE,
                        "'test_client_accuracies' holds no finite per-client accuracy")
  return summary, history, clients


def read_metrics(folder: str):
  """Cumulative bytes (and client FLOPs, when recorded) per round from metrics.csv."""
  path = os.path.join(folder, METRICS_FILE)
  try:
    with open(path, newline='') as f:
      reader = csv.DictReader(f)
      fields = reader.fieldnames or []
      rows = list(reader)
  except PermissionError:   # the machine's refusal, named as such by cli.guard
    raise
  except (OSError, csv.Error, UnicodeDecodeError) as e:
    raise _folder_error(folder, METRICS_FILE, f'cannot be read ({e})') from None
  missing = [k for k in ('round', 'bytes_down', 'bytes_up') if k not in fields]
  if missing:
    raise _folder_error(folder, METRICS_FILE, f'has no column {", ".join(missing)}')
  has_flops = 'client_flops' in fields
  by_round = {}
  try:
    for row in rows:   # after a resume the last row of a round wins
      flops = row.get('client_flops') if has_flops else None
      by_round[int(float(row['round']))] = (
          float(row['bytes_down']) + float(row['bytes_up']),
          float(flops) if flops not in (None, '') else float('nan'))
  except (TypeError, ValueError):
    raise _folder_error(folder, METRICS_FILE, 'holds a value that is not a number') from None
  rounds = sorted(by_round)
  if rounds != list(range(1, len(rounds) + 1)):
    raise _folder_error(folder, METRICS_FILE,
                        f'rounds are not 1, 2, ... without gaps (found {rounds[:5]}...)')
  cum_bytes = np.cumsum([by_round[r][0] for r in rounds], dtype=np.float64)
  cum_flops = np.cumsum([by_round[r][1] for r in rounds], dtype=np.float64) if has_flops else None
  return cum_bytes, cum_flops


def short_error(error: BaseException) -> str:
  """An exception as one short line for a user's error message: its type and up to 120 chars."""
  text = ' '.join(str(error).split())
  return f'{type(error).__name__}: {text[:120]}{"..." if len(text) > 120 else ""}'


_RESTORE = 'restore the file from the run or rerun it'   # the readers' fix for a damaged file


def csv_rows(path: str, error: Callable[[str], Exception] = RunFolderError,
             fix: str = _RESTORE) -> Tuple[List[str], List[Tuple[int, Dict[str, Any]]]]:
  """The header and the (line, row) pairs of a CSV file with a header.

  A file that is not UTF-8 CSV, or a row with more or fewer cells than the
  header, raises `error(message)`; the message names the file (and line) and
  ends with `fix`. The run-file readers below use it with RunFolderError, and
  `program/checkpoints.check_csv`, which checks a file before a run appends to
  it, with its CheckpointError and a fix for a resuming run.
  """
  try:
    with open(path, newline='', encoding='utf-8') as f:
      reader = csv.DictReader(f)
      rows = [(reader.line_num, row) for row in reader]
      fields = list(reader.fieldnames or [])
  except (csv.Error, UnicodeDecodeError) as e:
    raise error(f'{path} is not a readable CSV file ({short_error(e)}); {fix}') from None
  for line, row in rows:
    if None in row or None in row.values():   # more cells than the header, or fewer
      raise error(f'{path}, line {line}: has a different number of cells than the header (a '
                  f'damaged row); {fix}')
  return fields, rows


def not_a_number(path: str, line: int, error: Callable[[str], Exception] = RunFolderError,
                 fix: str = _RESTORE) -> Exception:
  """The error for a cell of `path`'s `line` that should be a number (see `csv_rows`)."""
  return error(f'{path}, line {line}: holds a value that is not a number (a damaged row); {fix}')


def read_history(path: str) -> List[Dict[str, float]]:
  """The rows of an eval.csv or a curve.csv (all sessions of a resumed run), as floats; empty
  cells left out; [] without the file. A damaged file raises RunFolderError."""
  if not os.path.exists(path):
    return []
  rows = []
  for line, row in csv_rows(path)[1]:
    try:
      rows.append({k: float(v) for k, v in row.items() if v not in ('', None)})
    except ValueError:
      raise not_a_number(path, line) from None
  return rows


def read_by_key(path: str, key: str, column: str) -> Dict[int, float]:
  """`column` of a metrics.csv by its `key` column (round, episode); {} without the file.

  After a resume the rounds (episodes) after the checkpoint are run again, so a
  key may repeat: its last row wins, as in `read_metrics`. A key whose last row
  leaves `column` empty is left out, and so are rows without a key. A damaged
  file raises RunFolderError.
  """
  if not os.path.exists(path):
    return {}
  last: Dict[int, Tuple[int, Any]] = {}
  for line, row in csv_rows(path)[1]:
    if row.get(key) not in (None, ''):
      try:
        last[int(float(row[key]))] = (line, row.get(column))
      except (TypeError, ValueError):
        raise not_a_number(path, line) from None
  out = {}
  for k, (line, v) in last.items():
    if v not in (None, ''):
      try:
        out[k] = float(v)
      except (TypeError, ValueError):
        raise not_a_number(path, line) from None
  return out


def read_total(path: str, column: str) -> float:
  """Sum of a metrics.csv column over the rounds of a run (`read_by_key`); NaN without the file."""
  if not os.path.exists(path):
    return float('nan')
  return float(sum(read_by_key(path, 'round', column).values()))


def load_run(folder: str) -> Run:
  """Reads and checks one run folder; RunFolderError names the folder and the file."""
  config = read_config(folder)
  summary, history, clients = read_results(folder)
  cum_bytes, cum_flops = read_metrics(folder)
  last = int(max((h['round'] for h in history), default=0))
  if last > len(cum_bytes):
    raise _folder_error(folder, METRICS_FILE, f'ends at round {len(cum_bytes)}, but '
                        f'{RESULTS_FILE} has an evaluation at round {last}')
  return Run(path=folder, config=config, summary=summary, history=history,
             client_accuracies=clients, cum_bytes=cum_bytes, cum_flops=cum_flops)


def walk(roots: Iterable[str], skip: Iterable[str] = ()):
  """(dirpath, dirnames, filenames) under every root, sorted, without checkpoints/ and
  tensorboard/, and without the folders whose real path is in `skip` (nor their insides);
  `dirnames` may be cleared by the caller to prune. A root that is not a folder is an error."""
  skip = set(skip)
  for root in roots:
    if not os.path.isdir(root):
      raise RunFolderError(f'--runs: {root} is not a folder')
    for dirpath, dirnames, filenames in os.walk(root):
      dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
      if os.path.realpath(dirpath) in skip:
        dirnames[:] = []
        continue
      yield dirpath, dirnames, filenames


def find_run_folders(roots: Iterable[str], skip: Iterable[str] = ()) -> Tuple[List[str], List[str]]:
  """(run folders, unfinished folders) under `roots`, searched recursively.

  A run folder holds results.json and config.toml. A folder with config.toml
  but no results.json is a run still going (or killed): it is listed as
  unfinished and left out. results.json without config.toml is an error.
  `skip`: real paths of folders (another task's runs) not to look into.
  """
  found, unfinished, seen = [], [], set()
  for dirpath, dirnames, filenames in walk(roots, skip):
    has_results, has_config = RESULTS_FILE in filenames, CONFIG_FILE in filenames
    if not (has_results or has_config):
      continue
    dirnames[:] = []    # a run folder holds no other runs
    if has_results and not has_config:
      raise _folder_error(dirpath, CONFIG_FILE,
                          f'missing (the folder has {RESULTS_FILE}, so it looks like a run)')
    real = os.path.realpath(dirpath)
    if real in seen:
      continue
    seen.add(real)
    (found if has_results else unfinished).append(dirpath)
  return found, unfinished
