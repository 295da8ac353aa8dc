"""program/tasks.py: a config's keys name its task; a task is one object in TASKS
(docs/ADDING_AN_ALGORITHM.md, "Adding a task")."""

import dataclasses
import json
import os
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


TOY_COMMAND = types.SimpleNamespace(define_flags=lambda: None, main=lambda argv: None)


@pytest.fixture
def toy_task(monkeypatch):
  task = tasks.Task('toy', 'toy config', ToyConfig, {'train': TOY_COMMAND}, ToyReport,
                    frozenset({'train', 'report'}))
  monkeypatch.setattr(tasks, 'TASKS', tasks.TASKS + (task,))
  yield task


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


def test_a_task_runs_only_the_programs_it_serves(toy_task):
  assert toy_task.command('train') is TOY_COMMAND
  with pytest.raises(ConfigError, match='programs.sweep supports classification and fewround; '
                     'toy is not one of them'):
    toy_task.command('sweep')
  for program in ('compare', 'reproduce', 'evaluate'):
    tasks.require(program, tasks.CLASSIFICATION)
    for task in (tasks.FEWROUND, tasks.RECOMMENDATION, toy_task):
      with pytest.raises(ConfigError, match=f'programs.{program} supports classification; '
                         f'{task.name} is not one of them'):
        tasks.require(program, task)


def test_the_order_is_explicit_and_every_task_serves_train_and_report():
  assert [t.name for t in tasks.TASKS] == ['classification', 'fewround', 'recommendation']
  for task in tasks.TASKS:
    assert {'train', 'report'} <= task.programs and set(task.commands) <= task.programs
    assert tasks.get(task.name) is task


def test_reports_find_each_tasks_runs_and_classification_takes_the_rest(toy_task, tmp_path):
  (tmp_path / 'toy1').mkdir()
  (tmp_path / 'toy1' / 'toy.json').write_text('{}')
  (tmp_path / 'cls').mkdir()
  (tmp_path / 'cls' / 'config.toml').write_text('name = "c"\n')
  (tmp_path / 'cls' / 'results.json').write_text(json.dumps({}))
  found, unfinished = tasks.report_runs([str(tmp_path)])
  assert found == {'classification': [str(tmp_path / 'cls')], 'toy': [str(tmp_path / 'toy1')]}
  assert unfinished == []
