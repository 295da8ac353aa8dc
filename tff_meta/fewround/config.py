"""Few-round learning experiment config: a TOML file, every scalar key also a flag.

Top-level keys are the `FewRoundConfig` fields; `[data]` holds the options of
the class-split source (`tasks.CLASS_SPLIT_SOURCES`, e.g. `cache_dir`,
`data_dir`, `path`), `[model_options]` the backbone's options (e.g.
`pool_padding`, `norm`). Flags are generated from the fields and their help
(`tff_meta.core.config_file`), so flags and configs cannot drift. beta is
`server_lr`, as in the training configs; the old names (`RENAMED`) are errors
that name the new ones.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Any, ClassVar, Dict, Optional, Tuple

from tff_meta.core import config_file
from tff_meta.core.config_file import ConfigError, option, table
from tff_meta.fewround.meta_update import META_UPDATES
from tff_meta.fewround.model import DISTANCE_CLASSIFIERS
from tff_meta.fewround.few_round_process import FewRoundHparams
from tff_meta.fewround.process import TEST_PROTOTYPES, TRAIN_PROTOTYPES


@dataclasses.dataclass
class FewRoundConfig:
  """One few-round experiment (Park et al. 2021); each field's help is its flag's."""
  # beta has the main program's name (server_lr); configs and flags with the old names fail.
  RENAMED: ClassVar[Dict[str, str]] = {'meta_lr': 'server_lr',
                                       'meta_lr_decay_episode': 'server_lr_decay_episode'}

  name: str = option('few_round', 'Run name; the default output folder is runs/<name>.')
  dataset: str = option('emnist', 'Class-split source: emnist (FEMNIST-62, TFF\'s file), '
                        'leaf_femnist (FEMNIST-62 in LEAF JSON), cifar100, mini_imagenet, '
                        'tiered_imagenet.')
  class_split: Tuple[float, ...] = option(
      (64, 16, 20), 'Meta-train/validation/test classes, as counts or proportions '
      '(e.g. 64,16,20).', item=float)
  backbone: str = option('conv4', 'Registered backbone model (conv4).')
  n_way: Tuple[int, ...] = option(
      (5,), 'N-way tasks: N (5), or low,high for N uniform in [low, high] (3,7).', item=int)
  examples_per_class: int = option(120, 'Images sampled per class per episode (paper: 120).')
  num_clients: int = option(10, 'K clients per episode (paper: 10; Appendix F: 50).')
  iid: bool = option(True, 'IID episodes (each class split equally) or non-IID (20 shards, '
                     '2 per client).')
  rounds: int = option(3, 'R: communication rounds per meta-training episode (an episode is '
                       '1 + R rounds).')
  test_rounds: Tuple[int, ...] = option(
      (3,), 'Rounds of FL at deployment, e.g. 3, or 1,2,3 for the mismatch tables.', item=int)
  episodes: int = option(8000, 'Meta-training episodes T; baselines pre-train for T * (R + 1) '
                         'rounds.')
  test_episodes: int = option(100, 'Test episodes averaged (mean and 95% CI).')
  eval_part: str = option('test', 'Classes the deployment is scored on: test, or validation '
                          'for choosing hparams.')
  local_steps: int = option(1, 'E: local SGD steps per round on the support set.')
  inner_lr: float = option(0.1, 'alpha: local SGD learning rate.')
  head_lr: float = option(0.0, 'Local SGD rate of the linear head (frl_linear, fedavg, '
                          'finetune_*); 0: inner_lr.')
  zero_head: bool = option(False, 'Start the linear head at zero in every episode and test run '
                           '(frl_linear, fedavg, finetune_*).')
  gamma: float = option(0.1, 'GPAL weight (Eq. 4) of the frl_distance_gpal method.')
  temperature: str = option(
      'none', 'Scale of the FRL methods\' distances: none = the paper\'s -d (Eq. 1-3); learned '
      '= -tau d with tau = exp(t) meta-learned, t starting at 0 (metric scaling, Oreshkin et '
      'al. 2018; docs/RESULTS.md).')
  temperature_lr_scale: float = option(
      100.0, 'With temperature = "learned": the meta-update\'s (Adam) step to t, times this '
      '(one scalar under Adam moves by about beta per episode).')
  server_lr: float = option(0.01, 'beta: Adam learning rate of the meta-update (was meta_lr).')
  server_lr_decay_episode: int = option(
      5000, 'Divide beta by 10 from this episode on (0: never; was meta_lr_decay_episode).')
  meta_update: str = option(
      'client_adam', 'FRL meta-update (Alg. 1 lines 24-26): client_adam = one Adam step per '
      'client from a shared state, models and Adam slots averaged; server_adam = one server '
      'Adam step on the mean first-order meta-gradient.')
  test_prototypes: str = option(
      'previous', 'Prototypes the distance classifier scores test queries with after R '
      'rounds: previous = P_{R-1}, computed at theta_{R-1} (the paper, Sec. 3.3); recomputed = '
      'P_R, computed by the clients at theta_R on their support sets (one more prototype '
      'upload). Deployment only; meta-training uses what train_prototypes names.')
  train_prototypes: str = option(
      'previous', 'Prototypes of the FRL meta-objective\'s query loss (Alg. 1 line 24): '
      'previous = P_{R-1} (the paper); recomputed = P_R at theta_R, as test_prototypes = '
      'recomputed scores (one more prototype upload per episode).')
  checkpoint_every: int = option(
      50, 'Checkpoint meta-training / pre-training every this many episodes / rounds (a '
      'stopped run resumes from the last one).')
  select_every: int = option(
      0, 'Deploy the preparing stage\'s checkpoint that scores best on validation classes, '
      'among every select_every episodes (pre-training: select_every * (R + 1) rounds) and the '
      'last (fewround/selection.py); a multiple of checkpoint_every. 0: the last (the paper).')
  select_episodes: int = option(50, 'Validation-class episodes each candidate is scored on '
                                '(select_every > 0).')
  methods: Tuple[str, ...] = option(
      ('frl_distance_gpal', 'frl_distance', 'frl_linear', 'fedavg', 'finetune_fedavg',
       'finetune_oneshot'), 'Methods to train and test (see fewround.baselines.METHODS).',
      item=str)
  seed: int = option(0, 'Seeds the class split, the episodes and the initial weights.')
  output_dir: str = option('', 'Output folder (default runs/<name>).')
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
    hp = FewRoundHparams(rounds=self.rounds, local_steps=self.local_steps,
                         inner_lr=self.inner_lr, head_lr=self.head_lr, zero_head=self.zero_head,
                         gamma=self.gamma,
                         meta_lr=self.server_lr,
                         meta_lr_decay_episode=self.server_lr_decay_episode,
                         meta_update=self.meta_update, test_prototypes=self.test_prototypes,
                         train_prototypes=self.train_prototypes)
    return dataclasses.replace(hp, **overrides)

  def resolved_output_dir(self) -> str:
    return self.output_dir or os.path.join('runs', self.name)

  def validate(self) -> 'FewRoundConfig':
    """Checks values; names (dataset, methods) are checked by their registries."""
    if len(self.n_way) not in (1, 2) or min(self.n_way) < 2 or list(self.n_way) != sorted(self.n_way):
      raise ConfigError(f'n_way must be N (e.g. 5) or a range [low, high] (e.g. [3, 7]) with '
                        f'2 <= low <= high, got {list(self.n_way)}.')
    for key in ('examples_per_class', 'num_clients', 'episodes', 'test_episodes',
                'local_steps', 'checkpoint_every'):
      if getattr(self, key) < 1:
        raise ConfigError(f'{key} must be >= 1, got {getattr(self, key)}.')
    if self.rounds < 1 or not self.test_rounds or min(self.test_rounds) < 1:
      raise ConfigError(f'rounds and test_rounds must be >= 1, got rounds={self.rounds}, '
                        f'test_rounds={list(self.test_rounds)}.')
    for key in ('inner_lr', 'server_lr'):
      if not getattr(self, key) > 0:
        raise ConfigError(f'{key} must be > 0, got {getattr(self, key)}.')
    if self.eval_part not in ('test', 'validation'):
      raise ConfigError(f"eval_part must be 'test' or 'validation', got {self.eval_part!r}.")
    if self.head_lr < 0:
      raise ConfigError(f'head_lr must be >= 0 (0: use inner_lr), got {self.head_lr}.')
    if self.meta_update not in META_UPDATES:
      raise ConfigError(f'meta_update must be one of {", ".join(META_UPDATES.names())}, '
                        f'got {self.meta_update!r}.')
    if self.test_prototypes not in TEST_PROTOTYPES:
      raise ConfigError(f'test_prototypes must be one of {", ".join(TEST_PROTOTYPES.names())}, '
                        f'got {self.test_prototypes!r}.')
    if self.train_prototypes not in TRAIN_PROTOTYPES:
      raise ConfigError(f'train_prototypes must be one of '
                        f'{", ".join(TRAIN_PROTOTYPES.names())}, got {self.train_prototypes!r}.')
    if self.gamma < 0:
      raise ConfigError(f'gamma must be >= 0, got {self.gamma}.')
    if self.temperature not in DISTANCE_CLASSIFIERS:
      raise ConfigError(f'temperature must be one of {", ".join(DISTANCE_CLASSIFIERS)}, '
                        f'got {self.temperature!r}.')
    if not self.temperature_lr_scale > 0:
      raise ConfigError(f'temperature_lr_scale must be > 0, got {self.temperature_lr_scale}.')
    if self.select_every < 0 or self.select_every % self.checkpoint_every:
      raise ConfigError(f'select_every must be 0 or a multiple of checkpoint_every '
                        f'({self.checkpoint_every}), got {self.select_every}.')
    if self.select_episodes < 1:
      raise ConfigError(f'select_episodes must be >= 1, got {self.select_episodes}.')
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
              defaults=tomllib.loads(config_file.to_toml(FewRoundConfig())),
              renamed=FewRoundConfig.RENAMED)


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
  config_file.define_flags(flags, config_file.scalar_fields(FewRoundConfig),
                           renamed=FewRoundConfig.RENAMED)
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
  return config_file.overrides_from_flags(flags_values, names, renamed=FewRoundConfig.RENAMED)
