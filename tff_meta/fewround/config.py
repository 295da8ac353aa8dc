"""Few-round learning experiment config: a TOML file, every scalar key also a flag.

Top-level keys are the `FewRoundConfig` fields; `[data]` holds the options of
the class-split source (`tasks.CLASS_SPLIT_SOURCES`, e.g. `cache_dir`,
`data_dir`, `path`), `[model_options]` the backbone's options (e.g.
`pool_padding`, `norm`). Flags are generated from the fields and their help
(`tff_meta.core.config_file`), and each key's range is declared with it
(`tff_meta.core.fields`), so flags, configs and errors cannot drift. beta is
`server_lr`, as in the training configs.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Any, Dict, Optional, Tuple

from tff_meta.core import config_file
from tff_meta.core.config_file import ConfigError, table
from tff_meta.core.fields import Check, above, at_least, check_fields, declared, field, one_of
from tff_meta.core.run_keys import RunKeys
from tff_meta.fewround.model import DISTANCE_CLASSIFIERS
from tff_meta.fewround.few_round_process import FewRoundHparams
# The test and training prototype rules register in fewround.process; the config's checks
# (`one_of(TRAIN_PROTOTYPES)`) and docs/CONFIG.md list them, so they are registered first.
from tff_meta.fewround import process as _rules  # noqa: F401  pylint: disable=unused-import


# n_way: N, or a range [low, high] of N.
N_WAY = Check('N (e.g. 5) or a range [low, high] (e.g. [3, 7]) with 2 <= low <= high',
              lambda v: len(v) in (1, 2) and min(v) >= 2 and list(v) == sorted(v))


@dataclasses.dataclass
class FewRoundConfig:
  """One few-round experiment (Park et al. 2021); each field's help is its flag's."""
  name: str = declared(RunKeys, 'name', 'few_round')
  dataset: str = field('emnist', 'Class-split source: emnist (FEMNIST-62, TFF\'s file), '
                       'leaf_femnist (FEMNIST-62 in LEAF JSON), cifar100, mini_imagenet, '
                       'tiered_imagenet.')
  class_split: Tuple[float, ...] = field(
      (64, 16, 20), 'Meta-train/validation/test classes, as counts or proportions '
      '(e.g. 64,16,20).', item=float)
  backbone: str = field('conv4', 'Registered backbone model (conv4).')
  n_way: Tuple[int, ...] = field(
      (5,), 'N-way tasks: N (5), or low,high for N uniform in [low, high] (3,7).', N_WAY,
      item=int)
  examples_per_class: int = field(120, 'Images sampled per class per episode (paper: 120).',
                                  at_least(1))
  num_clients: int = field(10, 'K clients per episode (paper: 10; Appendix F: 50).',
                           at_least(1))
  iid: bool = field(True, 'IID episodes (each class split equally) or non-IID (20 shards, '
                    '2 per client).')
  rounds: int = declared(FewRoundHparams, 'rounds')
  test_rounds: Tuple[int, ...] = field(
      (3,), 'Rounds of FL at deployment, e.g. 3, or 1,2,3 for the mismatch tables.',
      Check('one or more rounds, each >= 1', lambda v: bool(v) and min(v) >= 1), item=int)
  episodes: int = field(8000, 'Meta-training episodes T; baselines pre-train for T * (R + 1) '
                        'rounds.', at_least(1))
  test_episodes: int = field(100, 'Test episodes averaged (mean and 95% CI).', at_least(1))
  eval_part: str = field('test', 'Classes the deployment is scored on: test, or validation '
                         'for choosing hparams.', one_of(('test', 'validation')))
  local_steps: int = declared(FewRoundHparams, 'local_steps')
  inner_lr: float = declared(FewRoundHparams, 'inner_lr')
  head_lr: float = declared(FewRoundHparams, 'head_lr')
  zero_head: bool = declared(FewRoundHparams, 'zero_head')
  gamma: float = declared(FewRoundHparams, 'gamma')
  temperature: str = field(
      'none', 'Scale of the FRL methods\' distances: none = the paper\'s -d (Eq. 1-3); learned '
      '= -tau d with tau = exp(t) meta-learned, t starting at 0 (metric scaling, Oreshkin et '
      'al. 2018; docs/RESULTS.md).', one_of(DISTANCE_CLASSIFIERS))
  temperature_lr_scale: float = field(
      100.0, 'With temperature = "learned": the meta-update\'s (Adam) step to t, times this '
      '(one scalar under Adam moves by about beta per episode).', above(0))
  server_lr: float = declared(FewRoundHparams, 'server_lr')
  server_lr_decay_episode: int = declared(FewRoundHparams, 'server_lr_decay_episode')
  meta_update: str = declared(FewRoundHparams, 'meta_update')
  test_prototypes: str = declared(FewRoundHparams, 'test_prototypes')
  train_prototypes: str = declared(FewRoundHparams, 'train_prototypes')
  checkpoint_every: int = declared(RunKeys, 'checkpoint_every', 50)
  select_every: int = field(
      0, 'Deploy the preparing stage\'s checkpoint that scores best on validation classes, '
      'among every select_every episodes (pre-training: select_every * (R + 1) rounds) and the '
      'last (fewround/selection.py); a multiple of checkpoint_every. 0: the last (the paper).')
  select_episodes: int = field(50, 'Validation-class episodes each candidate is scored on '
                               '(select_every > 0).', at_least(1))
  methods: Tuple[str, ...] = field(
      ('frl_distance_gpal', 'frl_distance', 'frl_linear', 'fedavg', 'finetune_fedavg',
       'finetune_oneshot'), 'Methods to train and test (see fewround.baselines.METHODS).',
      item=str)
  seed: int = declared(RunKeys, 'seed')
  output_dir: str = declared(RunKeys, 'output_dir')
  data: Dict[str, Any] = table('Options of the class-split source, e.g. cache_dir, data_dir, '
                               'path (--data_path sets it).')
  model_options: Dict[str, Any] = table('Options of the backbone, e.g. norm, groups, '
                                        'pool_padding.')

  @property
  def ways(self) -> int:
    """Class slots: N, or the largest N of a random-way range."""
    return int(max(self.n_way))

  @property
  def n_way_arg(self):
    return self.n_way[0] if len(self.n_way) == 1 else tuple(self.n_way)

  def hparams(self, **overrides) -> FewRoundHparams:
    """The process hparams of this config: every key they share, then `overrides`."""
    values = {f.name: getattr(self, f.name) for f in dataclasses.fields(FewRoundHparams)
              if hasattr(self, f.name)}
    return FewRoundHparams(**{**values, **overrides})

  def resolved_output_dir(self) -> str:
    return self.output_dir or os.path.join('runs', self.name)

  def validate(self) -> 'FewRoundConfig':
    """Checks values; names (dataset, methods) are checked by their registries."""
    check_fields(self, ConfigError)   # each key's declared range
    if self.select_every < 0 or self.select_every % self.checkpoint_every:
      raise ConfigError(f'select_every must be 0 or a multiple of checkpoint_every '
                        f'({self.checkpoint_every}), got {self.select_every}.')
    return self


# Resuming into a run folder (`resume.check_resume`): keys that change how a run executes,
# not what it computes, may differ from the saved config.toml; every other key, a new one
# included, must be equal.
EXECUTION_ONLY = frozenset({'name', 'output_dir', 'checkpoint_every'})
# The test-time settings may change on a rerun (docs/PROGRAMS.md): they enter no preparing
# stage's checkpoints, and a method tested under other values is tested again
# (`experiment.finished_rows`), so results.json always matches config.toml.
RETESTED = frozenset({'test_rounds', 'test_episodes', 'eval_part', 'methods', 'test_prototypes',
                      'select_every', 'select_episodes'})
# More episodes extend a finished run (episode i is drawn from (seed, stream, i)); fewer are
# refused.
MAY_GROW = frozenset({'episodes'})


def resume_rules() -> Dict[str, Any]:
  """`resume.check_resume`'s rules for a programs.train run folder."""
  return dict(may_differ=EXECUTION_ONLY | RETESTED, may_grow=MAY_GROW,
              defaults=tomllib.loads(config_file.to_toml(FewRoundConfig())))


def load(path: Optional[str], overrides: Optional[Dict[str, Any]] = None) -> FewRoundConfig:
  """Reads a TOML config (None = defaults) and applies flag overrides."""
  return config_file.load(FewRoundConfig, path, overrides, see='configs/fewround/')


def toml_defaults() -> Dict[str, Any]:
  """Top-level key -> its default as TOML reads it back (tuples as lists).

  A config.toml written before a key existed meant the key's default: the
  rerun check (`experiment.finished_rows`) and the report
  (`analysis.fewround_report`) fill older configs with these.
  """
  return config_file.key_defaults(FewRoundConfig, tuples_as_lists=True)


def define_flags(flags) -> None:
  flags.DEFINE_string('config', None, 'TOML config file (configs/fewround/*.toml).')
  config_file.define_flags(flags, config_file.scalar_fields(FewRoundConfig))
  flags.DEFINE_string('data_path', None, 'The data folder: sets the [data] folder option of '
                      'the dataset (cache_dir for emnist, data_dir for cifar100, path for '
                      'mini_imagenet / tiered_imagenet).')
  flags.DEFINE_bool('no_download', None, 'A TFF dataset file missing from the data folder is an '
                    'error instead of a download with TFF\'s loader (sets [data] download = '
                    'false; emnist only).')


FOLDER_OPTIONS = ('path', 'data_dir', 'cache_dir')   # the sources' folder options


def with_data_path(cfg: FewRoundConfig, data_path: Optional[str], key: str) -> FewRoundConfig:
  """`cfg` with [data] `key` (the loader's folder option, `tasks.path_option`) set.

  --data_path names the one data folder, so the config's folder options of
  other sources go (a FEMNIST config run with --dataset=leaf_femnist keeps
  no `cache_dir` that the LEAF reader would refuse); other [data] options stay.
  """
  if not data_path:
    return cfg
  data = {k: v for k, v in cfg.data.items() if k not in FOLDER_OPTIONS}
  return dataclasses.replace(cfg, data={**data, key: data_path})


def without_download(cfg: FewRoundConfig, no_download: Optional[bool],
                     takes_download: bool) -> FewRoundConfig:
  """`cfg` with [data] download = false, for --no_download, where the source's loader takes
  it (`tasks.takes_option`: the TFF sqlite source emnist)."""
  if not (no_download and takes_download):
    return cfg
  return dataclasses.replace(cfg, data={**cfg.data, 'download': False})


def overrides_from_flags(flags_values) -> Dict[str, Any]:
  names = [f.name for f in config_file.scalar_fields(FewRoundConfig)]
  return config_file.overrides_from_flags(flags_values, names)
