"""The tasks a config can describe, each an object naming its config, commands and report.

A task is one of the papers' protocols:

- `classification`: clients with support/query splits, trained by an
  `algorithms` entry (FedMeta, FedEC and the report's protocol;
  `classification/config.py`);
- `fewround`: few-round learning's episodes of unseen classes (Park et al.,
  "Few-Round Learning for Federated Learning"; `fewround/config.py`);
- `recommendation`: users of a recommender (Chen et al., "Federated
  Meta-Learning for Recommendation"; `recommendation/config.py`).

`TASKS` is the tuple of their `Task` objects, in the order a config is
matched: a config belongs to the first task whose config class knows every
top-level key of the file. Classification is first on purpose: a config of
shared keys only (`name`, `seed`, ...) is a classification config, and run
folders that no other task claims are classification runs.
`programs.train` and `programs.sweep` read `--config` before they define
their flags, find its task here, and run that task's command
(`program/commands/`: `define_flags()` and `main(argv)`). Every program a
task does not serve refuses its configs and runs in one line (`require`).
`programs.report` asks every task for its run folders (`report_runs`), so
one command reports any mix of run folders.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
from typing import Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from tff_meta.analysis import fewround_report, recommend_report
from tff_meta.analysis import report as classification_report
from tff_meta.core.config_file import ConfigError, load_toml
from tff_meta.fewround.config import FewRoundConfig
from tff_meta.program.commands import (classification_sweep, classification_train,
                                       fewround_sweep, fewround_train, recommendation_train)
from tff_meta.classification.config import ExperimentConfig
from tff_meta.recommendation.config import RecommendConfig


@dataclasses.dataclass(frozen=True)
class Task:
  """One protocol: its config dataclass, the command that runs it for each program that
  dispatches on the config (`train`, `sweep`), every program that serves it, and its TF-free
  report module (`find_runs(roots, skip)`, `build`, `REFERENCE`)."""
  name: str
  description: str
  config_class: type
  commands: Mapping[str, types.ModuleType]
  report: types.ModuleType
  programs: FrozenSet[str]

  def known_keys(self) -> set:
    return {f.name for f in dataclasses.fields(self.config_class)}

  def command(self, program: str) -> types.ModuleType:
    """The module of this task's command for `program` (`define_flags`, `main`)."""
    require(program, self)
    return self.commands[program]


CLASSIFICATION = Task(
    'classification', 'client-protocol config (FedMeta, FedEC, report)', ExperimentConfig,
    {'train': classification_train, 'sweep': classification_sweep}, classification_report,
    frozenset({'train', 'sweep', 'compare', 'reproduce', 'evaluate', 'report'}))
FEWROUND = Task(
    'fewround', 'few-round learning config', FewRoundConfig,
    {'train': fewround_train, 'sweep': fewround_sweep}, fewround_report,
    frozenset({'train', 'sweep', 'report'}))
RECOMMENDATION = Task(
    'recommendation', 'recommendation config', RecommendConfig,
    {'train': recommendation_train}, recommend_report, frozenset({'train', 'report'}))

# The order configs are matched in (module docstring); classification first.
TASKS: Tuple[Task, ...] = (CLASSIFICATION, FEWROUND, RECOMMENDATION)


def get(name: str) -> Task:
  """The task called `name`."""
  for task in TASKS:
    if task.name == name:
      return task
  raise ConfigError(f'unknown task {name!r}; the tasks are {", ".join(t.name for t in TASKS)}')


def require(program: str, task: Task) -> None:
  """Refuses, in one line, a program that does not serve `task`."""
  if program in task.programs:
    return
  supported = [t.name for t in TASKS if program in t.programs]
  raise ConfigError(f'programs.{program} supports {" and ".join(supported)}; {task.name} is '
                    f'not one of them (a {task.name} config runs with '
                    f'{", ".join("programs." + p for p in sorted(task.programs))})')


def task_of(raw: Mapping, source: str = '') -> Task:
  """The first task whose config class knows every top-level key of `raw` (module
  docstring), else the task that knows the most of them (its loader then names the unknown
  keys)."""
  del source
  keys = set(raw)
  unknown_by_task: Dict[str, int] = {}
  for task in TASKS:
    unknown = len(keys - task.known_keys())
    if not unknown:
      return task
    unknown_by_task[task.name] = unknown
  return get(min(unknown_by_task, key=unknown_by_task.get))


def task_of_file(path: str) -> Task:
  """The task of the config file at `path` (classification when it is missing: the command's
  own loader names the problem)."""
  if not os.path.isfile(path):
    return CLASSIFICATION
  return task_of(load_toml(path), path)


def config_arg(argv: Sequence[str]) -> Optional[str]:
  """The first path of --config in `argv` (absl's --config=x or --config x), or None."""
  for i, arg in enumerate(argv):
    if arg.startswith('--config='):
      value = arg.split('=', 1)[1]
    elif arg == '--config' and i + 1 < len(argv):
      value = argv[i + 1]
    else:
      continue
    return value.split(',')[0].strip() or None
  return None


def task_of_argv(argv: Sequence[str]) -> Task:
  """The task of the command line's --config (classification without one)."""
  path = config_arg(argv)
  return CLASSIFICATION if path is None else task_of_file(path)


def run_program(program: str) -> None:
  """Defines the flags of the command line's task for `program`, then runs it."""
  from tff_meta.core import cli  # pylint: disable=g-import-not-at-top
  from tff_meta.program import errors  # pylint: disable=g-import-not-at-top
  try:
    command = task_of_argv(sys.argv[1:]).command(program)
  except ConfigError as e:
    cli.fail(e, 1)
  command.define_flags()
  errors.run(command.main)


def report_runs(roots: Sequence[str]) -> Tuple[Dict[str, list], List[str]]:
  """(task name -> its run folders under `roots`, unfinished folders); each task's reader
  decides which folders are its runs, and classification (the first task) takes the rest."""
  found: Dict[str, list] = {}
  claimed: set = set()
  for task in TASKS[1:]:
    runs = task.report.find_runs(roots, skip=claimed)
    if runs:
      found[task.name] = [r.path for r in runs]
      claimed |= {os.path.realpath(r.path) for r in runs}
  from tff_meta.core import run_folder  # pylint: disable=g-import-not-at-top
  folders, unfinished = run_folder.find_run_folders(roots, skip=claimed)
  rest = [f for f in folders if os.path.realpath(f) not in claimed]
  if rest:
    found = {TASKS[0].name: rest, **found}
  return found, unfinished
