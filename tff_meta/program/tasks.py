"""The tasks a config can describe, and the command each task runs for a program.

A task is one of the papers' protocols:

- `classification`: clients with support/query splits, trained by an
  `algorithms` entry (FedMeta, FedEC and the report's protocol;
  `program/config.py`);
- `fewround`: few-round learning's episodes of unseen classes (Park et al.,
  "Few-Round Learning for Federated Learning"; `fewround/config.py`);
- `recommendation`: users of a recommender (Chen et al., "Federated
  Meta-Learning for Recommendation"; `recommendation/config.py`).

A config names its task by its keys: it belongs to the task whose schema
knows every top-level key of the file, the first such task in `TASKS`'
order (classification first, so a config of shared keys only is a
classification config). `programs.train` and `programs.sweep` read
`--config` before they define their flags, find its task here, and run that
task's command (`program/commands/`). Each command module has
`define_flags()` and `main(argv)`; a task without a command for a program
says so in one line. `programs.report` asks every task for its run folders
(`report_runs`), so one command reports any mix of run folders.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tff_meta.core.config_file import ConfigError, load_toml
from tff_meta.core.registry import Registry


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  description: str
  config_class: str                    # 'module:Class', the config's dataclass
  commands: Mapping[str, str]          # program name -> command module
  report: str                          # module with find_runs(roots) and build(...)

  def known_keys(self) -> set:
    module, cls = self.config_class.split(':')
    return {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), cls))}

  def command(self, program: str):
    """The module of this task's command for `program` (`define_flags`, `main`)."""
    if program not in self.commands:
      runs_for = [t for t in TASKS.names() if program in TASKS.get(t).commands]
      raise ConfigError(f'programs.{program} has no command for a {self.description}; it runs '
                        f'{" and ".join(runs_for)} configs.')
    return importlib.import_module(self.commands[program])


TASKS: Registry[Task] = Registry('task')
TASKS.add('classification', Task(
    'classification', 'client-protocol config (FedMeta, FedEC, report)',
    'tff_meta.program.config:ExperimentConfig',
    {'train': 'tff_meta.program.commands.classification_train',
     'sweep': 'tff_meta.program.commands.classification_sweep'},
    'tff_meta.analysis.report'))
TASKS.add('fewround', Task(
    'fewround', 'few-round learning config', 'tff_meta.fewround.config:FewRoundConfig',
    {'train': 'tff_meta.program.commands.fewround_train',
     'sweep': 'tff_meta.program.commands.fewround_sweep'},
    'tff_meta.analysis.fewround_report'))
TASKS.add('recommendation', Task(
    'recommendation', 'recommendation config', 'tff_meta.recommendation.config:RecommendConfig',
    {'train': 'tff_meta.program.commands.recommendation_train'},
    'tff_meta.analysis.recommend_report'))


def task_of(raw: Mapping, source: str) -> Task:
  """The task whose config schema knows every top-level key of `raw` (module docstring), else
  the task that knows the most of them (its loader then names the unknown keys)."""
  keys = set(raw)
  unknown_by_task: Dict[str, List[str]] = {}
  for name in TASKS.names():
    task = TASKS.get(name)
    unknown = sorted(keys - task.known_keys())
    if not unknown:
      return task
    unknown_by_task[name] = unknown
  # None knows them all: the closest task's own loader names the unknown keys and the known ones.
  del source
  return TASKS.get(min(unknown_by_task, key=lambda n: len(unknown_by_task[n])))


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
  if path is None:
    return TASKS.get('classification')
  if not os.path.isfile(path):   # the command's own loader names the problem
    return TASKS.get('classification')
  return task_of(load_toml(path), path)


def run_program(program: str) -> None:
  """Defines the flags of the command line's task for `program`, then runs it."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from tff_meta.core import cli  # pylint: disable=g-import-not-at-top
  from tff_meta.program import errors  # pylint: disable=g-import-not-at-top
  try:
    command = task_of_argv(sys.argv[1:]).command(program)
  except ConfigError as e:
    cli.fail(e, 1)
  command.define_flags()
  del flags
  errors.run(command.main)


def report_runs(roots: Sequence[str]) -> Tuple[Dict[str, list], List[str]]:
  """(task name -> its run folders under `roots`, unfinished folders); each task's reader
  decides which folders are its runs, and classification takes the rest."""
  found: Dict[str, list] = {}
  claimed: set = set()
  for name in TASKS.names():
    if name == 'classification':
      continue
    runs = importlib.import_module(TASKS.get(name).report).find_runs(roots, skip=claimed)
    if runs:
      found[name] = [r.path for r in runs]
      claimed |= {os.path.realpath(r.path) for r in runs}
  from tff_meta.core import run_folder  # pylint: disable=g-import-not-at-top
  folders, unfinished = run_folder.find_run_folders(roots, skip=claimed)
  rest = [f for f in folders if os.path.realpath(f) not in claimed]
  if rest:
    found = {'classification': rest, **found}
  return found, unfinished


def report_module(name: str):
  """The TF-free report module of task `name` (`find_runs`, `build`, `REFERENCE`)."""
  return importlib.import_module(TASKS.get(name).report)
