"""Experiment configuration: a TOML file, with absl flags that override it.

A config file has top-level keys (the `ExperimentConfig` fields), a `[data]`
table of dataset-loader options, a `[model_options]` table and an `[hparams]`
table: the fields of the algorithms' hparams dataclasses
(`tff_meta.algorithms.Hparams`, their union, so one config serves every
method of a comparison); each algorithm reads its own (`AlgorithmEntry`).
`[method_hparams.<name>]` tables hold the hparams of one algorithm only.
Flags and their help are generated from these dataclasses and the
registries (`tff_meta.core.config_file`), so the flag help can never drift from
the config schema.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from typing import Any, Dict, Optional, Tuple

from tff_meta.core import config_file
from tff_meta.algorithms import ALGORITHMS, Hparams, readers
from tff_meta.core.config_file import ConfigError, coerce_value, load_toml, table
from tff_meta.core.fields import (Check, at_least, check_fields, declared, field, fraction,
                                  help_of)
from tff_meta.core.run_keys import RunKeys
from tff_meta.data import DATASETS
from tff_meta.data.registry import takes_option
from tff_meta.models import MODELS
from tff_meta.classification import privacy

_FEDMETA_FIVE = 'fedavg,fedavg_meta,fedmeta_maml,fedmeta_fomaml,fedmeta_metasgd'

def check_tables(raw: Dict[str, Any], source: str) -> None:
  """[data], [model_options], [hparams] and [method_hparams.<name>] must be TOML tables
  (a `ConfigError` naming the key, what it got and what it takes)."""
  for key in (f.name for f in dataclasses.fields(ExperimentConfig) if config_file.is_table(f)):
    if key in raw and not isinstance(raw[key], dict):
      raise ConfigError(f'{source}: {key} must be a table ([{key}] with key = value lines), '
                        f'got {raw[key]!r}.')
  for method, values in raw.get('method_hparams', {}).items():
    if not isinstance(values, dict):
      raise ConfigError(f'{source}: method_hparams.{method} must be a table '
                        f'([method_hparams.{method}] with hparams key = value lines), got '
                        f'{values!r}.')


def _is_client_split(split) -> bool:
  return (len(split) == 3 and all(math.isfinite(v) and v >= 0 for v in split)
          and abs(sum(split) - 1.0) <= 1e-6 and split[0] > 0)


# client_split's range (`ExperimentConfig.client_split`'s check).
CLIENT_SPLIT = Check('3 fractions (train, validation, test) >= 0 summing to 1 with train > 0, '
                     'e.g. 0.8,0.1,0.1', _is_client_split)


@dataclasses.dataclass
class ExperimentConfig:
  """One experiment; each field's help is its flag's (the registry-named ones list the registry)."""
  name: str = declared(RunKeys, 'name')
  algorithm: str = field('fedmeta_maml', lambda: (
      f'Algorithm registry name ({", ".join(ALGORITHMS.names())}; see README\'s catalog).'))
  algorithms: str = field('', 'Methods programs.compare runs, comma-separated (a TOML list in '
                          f'a config); empty = FedMeta\'s five ({_FEDMETA_FIVE}).')
  dataset: str = field('digits', lambda: (
      f'Dataset registry name ({", ".join(DATASETS.names())}; see docs/DATA.md).'))
  model: str = field('mlp', lambda: f'Model registry name ({", ".join(MODELS.names())}).')
  rounds: int = field(100, 'Communication rounds (episodes).', at_least(1))
  clients_per_round: int = field(4, 'Training clients sampled uniformly per round.', at_least(1))
  support_fraction: float = field(
      0.2, 'Fraction p of each client\'s data in its support set.', fraction())
  resample_support: bool = field(
      False, 'Draw each training client\'s support/query split afresh every round (FedMeta '
      'Alg. 1 line 13), seeded by (seed, round, client); same support fraction. Validation '
      'and test clients keep their fixed split. No effect on methods that train on all of a '
      'client\'s data (FedAvg, ...).')
  max_client_examples: int = field(
      0, 'Keep at most N of each sampled training client\'s examples a round, drawn afresh by '
      '(seed, round, client); an episode keeps its support/query proportion. Bounds the cost '
      'of rounds on large clients (Shakespeare roles). Validation and test clients are not '
      'capped. 0 = all.', at_least(0))
  min_samples: int = field(
      2, 'Clients with fewer samples are filtered out (FedMeta: 10/20/25).', at_least(0))
  draw_clients: int = field(
      0, 'Keep at most N of the clients that pass min_samples, drawn by seed, before the '
      'client split (FedMeta Table 1: 1,068 FEMNIST writers, for files that hold more); '
      '0 = all.', at_least(0))
  client_split: Tuple[float, float, float] = field(
      (0.8, 0.1, 0.1), 'Train/validation/test client fractions, e.g. 0.8,0.1,0.1.',
      CLIENT_SPLIT)
  known_test_fraction: float = field(
      0.0, 'Fraction of each training client\'s data held out as its local test set, to score '
      'known clients (FedEC protocol; 0 = only new clients are scored).', fraction(zero_ok=True))
  final_eval_rounds: int = field(
      1, 'Report the mean test accuracy over evaluations at each of the last N rounds '
      '(FedEC: 10).', at_least(1))
  seed: int = declared(RunKeys, 'seed')
  eval_every: int = declared(RunKeys, 'eval_every')
  checkpoint_every: int = declared(RunKeys, 'checkpoint_every')
  resident_state: bool = field(
      True, 'Keep the server state on the TFF worker between rounds and fetch it only on '
      'evaluation and checkpoint rounds (default; same results as false). On a pool the state '
      'stays on worker 0. Falls back, with a note, for algorithms with client state on a pool.')
  clients_per_call: int = field(
      0, 'Clients run in one TFF call: k > 1 sends groups of at most k clients to each call '
      '(their client work in one TF graph, summed before the aggregation; same results as 1); '
      '1 = one client per call; 0 (default) = one group per worker when a worker gets 2 or more '
      'clients per round. DP and secure aggregation always run one client per call.',
      at_least(0))
  max_concurrent_calls: int = field(
      -1, 'Computation calls each local TFF worker runs at once (its '
      '--max_concurrent_computation_calls); -1 = no bound: a round runs all its clients '
      'together, in the memory of all of them. A small bound caps the memory of rounds with '
      'many large clients (Shakespeare; benchmarks/config_cost.py).',
      Check('-1 (no bound) or >= 1', lambda v: v == -1 or v >= 1))
  worker_memory_mb: float = field(
      -1.0, 'Memory budget of each local TFF worker in MB, from which a run with '
      'max_concurrent_calls = -1 sizes the client calls the worker runs at once and, if not '
      'even one fits next to the resident server state, sends the state each round '
      '(runtime/execution_plan.py; same results). -1 = 2000 on machines with less than 16 GiB '
      'of memory, no budget elsewhere; 0 = no budget.',
      Check('-1 (the default for this machine), 0 (no budget) or > 0', lambda v: v == -1 or v >= 0))
  # Differential privacy and secure aggregation of the update (tff_meta/classification/privacy.py).
  dp_noise_multiplier: float = field(
      0.0, 'Differential privacy: noise multiplier z; the sum of clipped updates gets '
      'N(0, (z * clip)^2) noise (0 = no noise, epsilon = inf). Needs dp_clip. See '
      'docs/PRIVACY.md.', at_least(0))
  dp_clip: str = field(
      '', 'Differential privacy: L2 clip norm of each client\'s update (meta-gradient, model '
      'delta), or "adaptive" (tracks dp_clip_quantile of the norms); empty = no DP. DP makes '
      'the mean uniform over the round\'s clients.')
  dp_clip_quantile: float = field(
      0.5, 'Differential privacy with dp_clip = adaptive: the target quantile of update norms '
      'left unclipped.', fraction())
  dp_delta: float = field(
      0.0, 'Differential privacy: delta of the reported epsilon; 0 = 1/N^1.1 with N the number '
      'of training clients.', fraction(zero_ok=True))
  secure_aggregation: bool = field(
      False, 'Sum the clients\' updates with TFF\'s secure sum (SecureSumFactory, 32-bit '
      'quantization; simulated on this executor). Composes with DP.')
  output_dir: str = declared(RunKeys, 'output_dir')
  data: Dict[str, Any] = table('Dataset-loader options.')
  model_options: Dict[str, Any] = table('Options of the model builder.')
  hparams: Hparams = table('The algorithms\' hyperparameters.', factory=Hparams)
  # Per-algorithm [method_hparams.<name>] tables: hparams that differ by method in a
  # comparison (e.g. each method's validation-selected learning rate).
  method_hparams: Dict[str, Dict[str, Any]] = table('Hparams of one method.', nested=True)

  def for_algorithm(self, algorithm: str, output_dir: str) -> 'ExperimentConfig':
    """This config for `algorithm`, with its [method_hparams] applied."""
    hp = dataclasses.asdict(self.hparams)
    hp.update(self.method_hparams.get(algorithm, {}))
    return dataclasses.replace(self, algorithm=algorithm, output_dir=output_dir,
                               hparams=Hparams(**hp))

  def resolved_output_dir(self) -> str:
    return self.output_dir or os.path.join('runs', self.name)

  def validate(self) -> 'ExperimentConfig':
    ALGORITHMS.get(self.algorithm)
    for name in self.algorithms.split(','):
      if name.strip():
        ALGORITHMS.get(name.strip())
    DATASETS.get(self.dataset)
    MODELS.get(self.model)
    # Each key's and each hparam's range, declared with its field (the hparams' in the
    # algorithms' modules); then the checks across keys.
    check_fields(self, ConfigError)
    check_fields(self.hparams, ConfigError, prefix='hparams.')
    if self.final_eval_rounds > self.rounds:
      raise ConfigError(f'final_eval_rounds must be in [1, rounds={self.rounds}], '
                        f'got {self.final_eval_rounds}.')
    try:
      privacy.validate(self)
    except privacy.PrivacyConfigError as e:
      raise ConfigError(str(e)) from None
    return self


# Resuming into a run folder (`resume.check_resume`): keys that change how a run executes,
# not what it computes (same results, docs/CONFIG.md), may differ from the saved config.toml.
# Every other key, a new one included, must be equal. `data.cache_mb` sizes the cache of
# clients read on demand (the same arrays whatever its size), `worker_memory_mb` the worker's
# calls at once and whether the state stays on it (the same results).
EXECUTION_ONLY = frozenset({'name', 'output_dir', 'checkpoint_every',
                            'resident_state', 'max_concurrent_calls', 'worker_memory_mb',
                            'data.cache_mb'})
# Keys a run's config.toml holds that the run itself does not read: `algorithms` lists the
# methods of programs.compare (a folder holds one of them), and `method_hparams`, which
# `for_algorithm` has applied to [hparams] (compared).
NOT_READ_BY_A_RUN = frozenset({'algorithms', 'method_hparams'})
# More rounds extend a finished run: round r's clients and data are seeded by (seed, r), so it
# ends where a run of that many rounds would. Fewer rounds are refused.
MAY_GROW = frozenset({'rounds'})


def resume_rules() -> Dict[str, Any]:
  """`resume.check_resume`'s rules for a programs.train run folder."""
  return dict(may_differ=EXECUTION_ONLY | NOT_READ_BY_A_RUN, may_grow=MAY_GROW,
              defaults=tomllib.loads(config_file.to_toml(ExperimentConfig())))


TOP_LEVEL = {f.name: f for f in config_file.scalar_fields(ExperimentConfig)}
HPARAMS = {f.name: f for f in dataclasses.fields(Hparams)}


def hparam_help(name: str) -> str:
  """An hparam's help: its field's text and the algorithms that read it (from the registry)."""
  users = readers(name)
  used = 'every algorithm' if len(users) == len(ALGORITHMS.names()) else ', '.join(users)
  return f'{help_of(HPARAMS[name])} Read by: {used}.'


def flag_help(name: str) -> str:
  """The help of key `name`'s flag: its field's text (an hparam's says which algorithms read it)."""
  return hparam_help(name) if name in HPARAMS else help_of(TOP_LEVEL[name])


def from_dict(raw: Dict[str, Any], source: str = '<dict>') -> ExperimentConfig:
  check_tables(raw, source)
  raw = dict(raw)
  tables = {f.name: raw.pop(f.name, {}) for f in dataclasses.fields(ExperimentConfig)
            if config_file.is_table(f)}
  kwargs = {}
  for key, value in raw.items():
    if key not in TOP_LEVEL:
      raise config_file.unknown_key(source, key, TOP_LEVEL,
                                    ' and the tables [data], [model_options], [hparams]')
    kwargs[key] = coerce_value(TOP_LEVEL[key], value, f'{source}: {key}')
  hp = _coerce_hparams(tables['hparams'], HPARAMS, source, 'hparams')
  methods = {}
  for method, values in tables['method_hparams'].items():
    own = {f.name: f for f in dataclasses.fields(ALGORITHMS.get(method).hparams)}
    methods[method] = _coerce_hparams(values, own, source, f'method_hparams.{method}',
                                      f'{method} reads')
  return ExperimentConfig(**kwargs, data=dict(tables['data']),
                          model_options=dict(tables['model_options']), hparams=Hparams(**hp),
                          method_hparams=methods)


def _coerce_hparams(raw: Dict[str, Any], known: Dict[str, dataclasses.Field], source: str,
                    table_name: str, reads: str = 'valid') -> Dict[str, Any]:
  """Table [`table_name`]'s hparams, typed; an unknown key lists the `known` ones."""
  for key in raw:
    if key not in known:
      raise ConfigError(f'{source}: unknown [{table_name}] key {key!r}; {reads}: '
                        f'{sorted(known)}.')
  return {key: coerce_value(HPARAMS[key], value, f'{source}: {table_name}.{key}')
          for key, value in raw.items()}


def load(path: str, overrides: Optional[Dict[str, Any]] = None) -> ExperimentConfig:
  """Reads a TOML config; `overrides` maps flat keys (top-level or hparams) to values."""
  return apply_overrides(from_dict(load_toml(path), path), overrides or {})


def apply_overrides(cfg: ExperimentConfig, overrides: Dict[str, Any]) -> ExperimentConfig:
  hp = dataclasses.asdict(cfg.hparams)
  top = {k: getattr(cfg, k) for k in TOP_LEVEL}
  data = dict(cfg.data)
  if overrides.get('dataset') not in (None, cfg.dataset):
    data = {}   # the config's loader options belong to its own dataset
  for key, value in overrides.items():
    if value is None:
      continue
    if key in TOP_LEVEL:
      top[key] = coerce_value(TOP_LEVEL[key], value, f'--{key}')
    elif key in HPARAMS:
      hp[key] = coerce_value(HPARAMS[key], value, f'--{key}')
    elif key == 'cache_dir':
      data['cache_dir'] = value
    elif key == 'no_download':   # below, once the dataset is known
      continue
    else:
      raise ConfigError(f'Unknown override {key!r}.')
  if overrides.get('no_download') and takes_option(top['dataset'], 'download'):
    data['download'] = False   # the loaders of TFF's sqlite files take `download`
  methods = {m: dict(v) for m, v in cfg.method_hparams.items()}
  for values in methods.values():   # a flag overrides every method's value too
    for key in values:
      if overrides.get(key) is not None:
        values[key] = hp[key]
  return ExperimentConfig(**top, data=data, model_options=dict(cfg.model_options),
                          hparams=Hparams(**hp), method_hparams=methods)


def define_flags(flags_module) -> None:
  """Defines --config plus one override flag per config field (default: from the config)."""
  flags_module.DEFINE_string('config', 'configs/demo/digits.toml', 'TOML experiment config.')
  config_file.define_flags(flags_module, [*TOP_LEVEL.values(), *HPARAMS.values()],
                           describe=lambda field: flag_help(field.name))
  flags_module.DEFINE_string('cache_dir', None, 'Overrides [data].cache_dir (TFF sqlite folder).')
  flags_module.DEFINE_bool('no_download', None, 'A TFF dataset file missing from cache_dir is '
                           'an error instead of a download with TFF\'s loader (sets [data] '
                           'download = false).')


def overrides_from_flags(flag_values) -> Dict[str, Any]:
  return config_file.overrides_from_flags(flag_values,
                                          [*TOP_LEVEL, *HPARAMS, 'cache_dir', 'no_download'])
