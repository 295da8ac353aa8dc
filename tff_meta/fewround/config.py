"""Few-round learning experiment config: a TOML file, every scalar key also a flag.

Top-level keys are the `FewRoundConfig` fields; `[data]` holds the options of
the class-split source (`tasks.CLASS_SPLIT_SOURCES`, e.g. `cache_dir`,
`data_dir`, `path`), `[model_options]` the backbone's options (e.g.
`pool_padding`, `norm`). Flags are generated from the fields, with help from
`HELP`, so flags and configs cannot drift.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Optional, Tuple

from tff_meta.fewround.meta_update import META_UPDATES
from tff_meta.fewround.process import FewRoundHparams
from tff_meta.program.config import ConfigError, coerce_dataclass, coerce_value, load_toml


@dataclasses.dataclass
class FewRoundConfig:
  name: str = 'few_round'
  dataset: str = 'emnist'
  class_split: Tuple[float, ...] = (64, 16, 20)
  backbone: str = 'conv4'
  n_way: Tuple[int, ...] = (5,)
  examples_per_class: int = 120
  num_clients: int = 10
  iid: bool = True
  rounds: int = 3
  test_rounds: Tuple[int, ...] = (3,)
  episodes: int = 8000
  test_episodes: int = 100
  eval_part: str = 'test'
  local_steps: int = 1
  inner_lr: float = 0.1
  head_lr: float = 0.0
  zero_head: bool = False
  gamma: float = 0.1
  meta_lr: float = 0.01
  meta_lr_decay_episode: int = 5000
  meta_update: str = 'client_adam'
  checkpoint_every: int = 50
  methods: Tuple[str, ...] = ('frl_distance_gpal', 'frl_distance', 'frl_linear', 'fedavg',
                              'finetune_fedavg', 'finetune_oneshot')
  seed: int = 0
  output_dir: str = ''
  data: Dict[str, Any] = dataclasses.field(default_factory=dict)
  model_options: Dict[str, Any] = dataclasses.field(default_factory=dict)

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
                         meta_lr=self.meta_lr, meta_lr_decay_episode=self.meta_lr_decay_episode,
                         meta_update=self.meta_update)
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
    for key in ('inner_lr', 'meta_lr'):
      if not getattr(self, key) > 0:
        raise ConfigError(f'{key} must be > 0, got {getattr(self, key)}.')
    if self.eval_part not in ('test', 'validation'):
      raise ConfigError(f"eval_part must be 'test' or 'validation', got {self.eval_part!r}.")
    if self.head_lr < 0:
      raise ConfigError(f'head_lr must be >= 0 (0: use inner_lr), got {self.head_lr}.')
    if self.meta_update not in META_UPDATES:
      raise ConfigError(f'meta_update must be one of {", ".join(META_UPDATES.names())}, '
                        f'got {self.meta_update!r}.')
    if self.gamma < 0:
      raise ConfigError(f'gamma must be >= 0, got {self.gamma}.')
    return self


HELP = {
    'name': 'Run name; the default output folder is runs/<name>.',
    'dataset': 'Class-split source: emnist (FEMNIST-62), cifar100, mini_imagenet, tiered_imagenet.',
    'class_split': 'Meta-train/validation/test classes, as counts or proportions (e.g. 64,16,20).',
    'backbone': 'Registered backbone model (conv4).',
    'n_way': 'N-way tasks: N (5), or low,high for N uniform in [low, high] (3,7).',
    'examples_per_class': 'Images sampled per class per episode (paper: 120).',
    'num_clients': 'K clients per episode (paper: 10; Appendix F: 50).',
    'iid': 'IID episodes (each class split equally) or non-IID (20 shards, 2 per client).',
    'rounds': 'R: communication rounds per meta-training episode (an episode is 1 + R rounds).',
    'test_rounds': 'Rounds of FL at deployment, e.g. 3, or 1,2,3 for the mismatch tables.',
    'episodes': 'Meta-training episodes T; baselines pre-train for T * (R + 1) rounds.',
    'test_episodes': 'Test episodes averaged (mean and 95% CI).',
    'eval_part': 'Classes the deployment is scored on: test, or validation for choosing hparams.',
    'local_steps': 'E: local SGD steps per round on the support set.',
    'inner_lr': 'alpha: local SGD learning rate.',
    'head_lr': 'Local SGD rate of the linear head (frl_linear, fedavg, finetune_*); 0: inner_lr.',
    'zero_head': 'Start the linear head at zero in every episode and test run (frl_linear, '
                 'fedavg, finetune_*).',
    'gamma': 'GPAL weight (Eq. 4) of the frl_distance_gpal method.',
    'meta_lr': 'beta: Adam learning rate of the meta-update.',
    'meta_lr_decay_episode': 'Divide beta by 10 from this episode on (0: never).',
    'meta_update': 'FRL meta-update (Alg. 1 lines 24-26): client_adam = one Adam step per '
                   'client from a shared state, models and Adam slots averaged; server_adam = '
                   'one server Adam step on the mean first-order meta-gradient.',
    'checkpoint_every': 'Checkpoint meta-training / pre-training every this many episodes / '
                        'rounds (a stopped run resumes from the last one).',
    'methods': 'Methods to train and test (see fewround.baselines.METHODS).',
    'seed': 'Seeds the class split, the episodes and the initial weights.',
    'output_dir': 'Output folder (default runs/<name>).',
}

_TUPLE_TYPES = {'class_split': float, 'n_way': int, 'test_rounds': int, 'methods': str}


def _coerce(field: dataclasses.Field, value, where: str, element_type: type):
  """`program.config.coerce_value`, plus [tables] as dicts and a scalar for a 1-tuple."""
  default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
  if isinstance(default, dict):
    if not isinstance(value, dict):
      raise ConfigError(f'{where}: expected a [{field.name}] table, got {value!r}.')
    return dict(value)
  if isinstance(default, tuple):
    if isinstance(value, str):
      value = [v.strip() for v in value.split(',') if v.strip()]
    elif not isinstance(value, (list, tuple)):
      value = [value]
  return coerce_value(field, value, where, element_type)


def load(path: Optional[str], overrides: Optional[Dict[str, Any]] = None) -> FewRoundConfig:
  """Reads a TOML config (None = defaults) and applies flag overrides."""
  raw: Dict[str, Any] = load_toml(path, see='configs/fewround/') if path else {}
  raw.update(overrides or {})
  return coerce_dataclass(FewRoundConfig, raw, _TUPLE_TYPES, source=path or '<flags>',
                          coerce=_coerce)


def define_flags(flags) -> None:
  flags.DEFINE_string('config', None, 'TOML config file (configs/fewround/*.toml).')
  for field in dataclasses.fields(FewRoundConfig):
    if field.name in ('data', 'model_options'):
      continue
    define = {'int': flags.DEFINE_integer, 'float': flags.DEFINE_float,
              'bool': flags.DEFINE_bool}.get(field.type, flags.DEFINE_string)
    define(field.name, None, HELP[field.name])
  flags.DEFINE_string('data_path', None, 'The data folder: sets the [data] folder option of '
                      'the dataset (cache_dir for emnist, data_dir for cifar100, path for '
                      'mini_imagenet / tiered_imagenet).')


def with_data_path(cfg: FewRoundConfig, data_path: Optional[str], key: str) -> FewRoundConfig:
  """`cfg` with [data] `key` (the loader's folder option, `tasks.path_option`) set."""
  if not data_path:
    return cfg
  return dataclasses.replace(cfg, data={**cfg.data, key: data_path})


def overrides_from_flags(flags_values) -> Dict[str, Any]:
  out = {}
  for field in dataclasses.fields(FewRoundConfig):
    if field.name in ('data', 'model_options'):
      continue
    value = getattr(flags_values, field.name)
    if value is not None:
      out[field.name] = value
  return out
