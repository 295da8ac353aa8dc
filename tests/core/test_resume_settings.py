"""Resuming into a run folder: each writer (programs.train, few_round, recommend) refuses a
folder whose config.toml holds other settings of what it computes, and leaves it byte for byte
as it was (its .lock file included); the settings of how a run executes may differ.

In process and without training: the refusal comes before any computation. The programs'
own runs are in tests/programs/test_user_errors.py.
"""

import dataclasses
import hashlib
import os
import tomllib

import pytest

from tff_meta.core import resume
from tff_meta.core import config_file, run_folder
from tff_meta.fewround import config as fewround_config
from tff_meta.fewround import experiment as fewround_experiment
from tff_meta.classification import config as train_config
from tff_meta.classification import experiment as train_experiment
from tff_meta.recommendation import config as recommend_config
from tff_meta.recommendation import experiment as recommend_experiment

STACKS = {'train': (train_config.ExperimentConfig, train_config.resume_rules),
          'few_round': (fewround_config.FewRoundConfig, fewround_config.resume_rules),
          'recommend': (recommend_config.RecommendConfig, recommend_config.resume_rules)}


def hashes(folder):
  """path -> sha256 of every file under `folder`, hidden ones (.lock) included."""
  out = {}
  for root, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
  return out


def _as_toml(cfg):
  return tomllib.loads(config_file.to_toml(cfg))


@pytest.mark.parametrize('stack', sorted(STACKS))
def test_every_key_but_the_declared_ones_is_compared(stack):
  """A key nobody declared (a new one too) counts as changing what is computed."""
  cls, rules = STACKS[stack]
  saved = _as_toml(cls())
  may_differ = rules()['may_differ']
  for key, value in saved.items():
    tables = {key: {k: '<changed>' for k in value}} if isinstance(value, dict) else {}
    changed = {**saved, key: '<changed>'} if not tables else {**saved, **tables}
    changes = resume.settings_changes(saved, changed, **rules())
    if key in may_differ:
      assert changes == [], (key, changes)
    elif not tables or value:   # an empty table ([data] by default) has no keys to change
      assert changes and all(c.startswith(f'{key}') for c in changes), (key, changes)
  assert 'seed' in saved and 'seed' not in may_differ


def test_the_declared_keys_are_keys():
  for cls, rules in STACKS.values():
    keys = set(_as_toml(cls())) | {f.name for f in dataclasses.fields(cls)}
    declared = rules()['may_differ'] | rules().get('may_grow', frozenset())
    # A dotted key is a key of a table the config has ([data] holds the loader's options).
    assert {k.split('.')[0] for k in declared} <= keys


def test_the_client_cache_size_may_change_on_resume():
  saved = {'seed': 0, 'data': {'cache_dir': 'a', 'cache_mb': 256}}
  rules = train_config.resume_rules()
  assert resume.settings_changes(saved, {**saved, 'data': {'cache_dir': 'a', 'cache_mb': 16}},
                                 **rules) == []
  assert resume.settings_changes(saved, {**saved, 'data': {'cache_dir': 'b', 'cache_mb': 256}},
                                 **rules) == ["data.cache_dir: 'a' -> 'b'"]


# --------------------------------------------------------------------------- programs.train

def _saved_train_run(folder, **changes):
  cfg = train_config.ExperimentConfig(output_dir=str(folder), **changes)
  folder.mkdir()
  (folder / run_folder.CONFIG_FILE).write_text(
      config_file.to_toml(cfg.for_algorithm(cfg.algorithm, cfg.output_dir)))
  (folder / '.lock').write_text('12345\n')
  return cfg


@pytest.mark.parametrize('change, expect', [
    (dict(seed=7), 'seed: 0 -> 7'),
    (dict(algorithm='fedavg'), "algorithm: 'fedmeta_maml' -> 'fedavg'"),
    (dict(rounds=50), 'rounds: 100 -> 50 (it may only grow)'),
    (dict(eval_every=5), 'eval_every: 10 -> 5'),
    (dict(client_split=(0.6, 0.2, 0.2)), 'client_split: [0.8, 0.1, 0.1] -> [0.6, 0.2, 0.2]'),
    (dict(data={'num_clients': 20}), 'data.num_clients: (absent) -> 20'),
    (dict(model_options={'hidden_units': [8]}), 'model_options.hidden_units: (absent) -> [8]'),
])
def test_train_refuses_other_settings_unchanged(tmp_path, change, expect):
  folder = tmp_path / 'run'
  cfg = _saved_train_run(folder)
  before = hashes(folder)
  other = dataclasses.replace(cfg, **change)
  with pytest.raises(run_folder.RunFolderError, match='holds a run with other settings') as e:
    train_experiment.check_folder(other)
  assert expect in str(e.value)
  with pytest.raises(run_folder.RunFolderError):   # the claim checks before it locks
    resume.claim_for_resume(str(folder), _as_toml(other), **train_config.resume_rules())
  assert hashes(folder) == before


def test_train_hparams_are_compared_as_the_method_reads_them(tmp_path):
  folder = tmp_path / 'run'
  cfg = _saved_train_run(folder)
  hp = dataclasses.replace(cfg.hparams, inner_lr=cfg.hparams.inner_lr * 2)
  with pytest.raises(run_folder.RunFolderError, match='hparams.inner_lr'):
    train_experiment.check_folder(dataclasses.replace(cfg, hparams=hp))
  # [method_hparams.<name>] counts through the [hparams] it gives the run's algorithm.
  with pytest.raises(run_folder.RunFolderError, match='hparams.inner_lr'):
    train_experiment.check_folder(dataclasses.replace(
        cfg, method_hparams={'fedmeta_maml': {'inner_lr': 0.5}}))
  train_experiment.check_folder(dataclasses.replace(
      cfg, method_hparams={'fedavg': {'client_lr': 0.5}}, algorithms='fedavg,fedmeta_maml'))


def test_train_may_change_how_it_runs_and_add_rounds(tmp_path):
  cfg = _saved_train_run(tmp_path / 'run')
  train_experiment.check_folder(dataclasses.replace(
      cfg, name='other', rounds=200, checkpoint_every=5,
      resident_state=False, max_concurrent_calls=2))


# --------------------------------------------------------------------------- few_round

def test_few_round_refuses_other_settings_and_allows_test_settings(tmp_path):
  out = str(tmp_path / 'run')
  cfg = fewround_config.FewRoundConfig(output_dir=out, episodes=100)
  fewround_experiment.prepare_output(cfg, out)
  before = hashes(out)
  for change, expect in ((dict(seed=1), 'seed: 0 -> 1'), (dict(inner_lr=0.5), 'inner_lr'),
                         (dict(episodes=50), 'episodes: 100 -> 50 (it may only grow)'),
                         (dict(model_options={'norm': 'group'}), 'model_options.norm')):
    with pytest.raises(run_folder.RunFolderError, match='other settings') as e:
      fewround_experiment.prepare_output(dataclasses.replace(cfg, **change), out)
    assert expect in str(e.value)
    assert hashes(out) == before
  # Test-time settings, more episodes and how it runs may change (config.toml then says so).
  fewround_experiment.prepare_output(dataclasses.replace(
      cfg, test_rounds=(1, 2, 3), test_episodes=7, methods=('fedavg',), checkpoint_every=10,
      episodes=200, name='again'), out)
  saved = tomllib.loads((tmp_path / 'run' / run_folder.CONFIG_FILE).read_text())
  assert saved['episodes'] == 200 and saved['test_rounds'] == [1, 2, 3]


# --------------------------------------------------------------------------- recommend

def test_recommend_refuses_other_settings_before_it_prepares_data(tmp_path):
  out = tmp_path / 'run'
  out.mkdir()
  # Its data file is missing: preparing the data would fail with another error.
  cfg = recommend_config.RecommendConfig(task='service', output_dir=str(out),
                                         data_path=str(tmp_path / 'absent.csv'))
  (out / run_folder.CONFIG_FILE).write_text(config_file.to_toml(cfg))
  before = hashes(out)
  with pytest.raises(run_folder.RunFolderError, match='seed: 0 -> 3; server_lr: 0.001 -> 0.1'):
    recommend_experiment.run(dataclasses.replace(cfg, seed=3, server_lr=0.1))
  with pytest.raises(run_folder.RunFolderError, match='episodes: 5000 -> 6000'):
    recommend_experiment.run(dataclasses.replace(cfg, episodes=6000))   # cosine spans them
  assert hashes(out) == before
  with pytest.raises(Exception, match='absent.csv') as e:   # the same settings get to the data
    recommend_experiment.run(dataclasses.replace(cfg, methods='mru', checkpoint_every=10,
                                                 name='x'))
  assert not isinstance(e.value, run_folder.RunFolderError)


@pytest.mark.parametrize('saved, hinted', [
    ('rounds = 10\nold_name = 1\n', True),          # a key today's settings lack
    ('rounds = 10\nseed = 1\n', False),             # a changed setting only
    ('rounds = 10\nseed = 1\n[how]\na = 1\n', False)])   # and a table that may differ
def test_the_rename_hint_is_given_only_for_a_key_this_version_lacks(tmp_path, saved, hinted):
  (tmp_path / resume.CONFIG_FILE).write_text(saved)
  with pytest.raises(resume.RunFolderError) as error:
    resume.check_resume(str(tmp_path), {'rounds': 10, 'seed': 0}, may_differ=('how',))
  assert ('rename_config_keys' in str(error.value)) == hinted, error.value
