"""program/tasks.py: a config's keys name its task; a task is one registry entry
(docs/ADDING_AN_ALGORITHM.md, "Adding a task")."""

import dataclasses
import json
import os
import sys
import types

import pytest

from tff_meta.core.config_file import ConfigError
from tff_meta.core.fields import field
from tff_meta.program import tasks


@dataclasses.dataclass
class ToyConfig:
  name: str = field('toy', 'Run name.')
  toy_steps: int = field(3, 'Steps of the toy task.')


class ToyReport:
  REFERENCE = 'a'

  @staticmethod
  def find_runs(roots, skip=()):
    skip = set(skip)
    runs = []
    for root in roots:
      for dirpath, _, files in os.walk(root):
        if 'toy.json' in files and os.path.realpath(dirpath) not in skip:
          runs.append(types.SimpleNamespace(path=dirpath))
    return runs


@pytest.fixture
def toy_task(monkeypatch):
  for name, module in (('toy_task_config', types.SimpleNamespace(ToyConfig=ToyConfig)),
                       ('toy_task_command', types.SimpleNamespace(define_flags=lambda: None,
                                                                  main=lambda argv: None)),
                       ('toy_task_report', ToyReport)):
    monkeypatch.setitem(sys.modules, name, module)
  task = tasks.Task('toy', 'toy config', 'toy_task_config:ToyConfig',
                    {'train': 'toy_task_command'}, 'toy_task_report')
  tasks.TASKS.add('toy', task)
  yield task
  tasks.TASKS.remove('toy')


def test_the_config_keys_name_the_task(toy_task, tmp_path):
  assert tasks.task_of({'name': 'x', 'toy_steps': 2}, 'c.toml') is toy_task
  assert tasks.task_of({'name': 'x'}, 'c.toml').name == 'classification'   # shared keys only
  assert tasks.task_of({'n_way': 5, 'episodes': 3}, 'c.toml').name == 'fewround'
  assert tasks.task_of({'task': 'movielens', 'episodes': 3}, 'c.toml').name == 'recommendation'
  path = tmp_path / 'toy.toml'
  path.write_text('toy_steps = 4\n')
  assert tasks.task_of_argv([f'--config={path}', '--seed=1']) is toy_task
  assert tasks.task_of_argv(['--config', str(path)]) is toy_task
  assert tasks.task_of_argv([]).name == 'classification'


def test_a_task_runs_only_the_programs_it_has_a_command_for(toy_task):
  assert toy_task.command('train') is sys.modules['toy_task_command']
  with pytest.raises(ConfigError, match='programs.sweep has no command for a toy config; it '
                     'runs classification and fewround configs'):
    toy_task.command('sweep')


def test_reports_find_each_tasks_runs_and_classification_takes_the_rest(toy_task, tmp_path):
  (tmp_path / 'toy1').mkdir()
  (tmp_path / 'toy1' / 'toy.json').write_text('{}')
  (tmp_path / 'cls').mkdir()
  (tmp_path / 'cls' / 'config.toml').write_text('name = "c"\n')
  (tmp_path / 'cls' / 'results.json').write_text(json.dumps({}))
  found, unfinished = tasks.report_runs([str(tmp_path)])
  assert found == {'classification': [str(tmp_path / 'cls')], 'toy': [str(tmp_path / 'toy1')]}
  assert unfinished == []
