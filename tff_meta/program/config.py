"""Experiment configuration: a TOML file, with absl flags that override it.

A config file has top-level keys (the `ExperimentConfig` fields), a `[data]`
table of dataset-loader options, a `[model_options]` table and an `[hparams]`
table: the fields of the algorithms' hparams dataclasses
(`tff_meta.algorithms.Hparams`, their union, so one config serves every
method of a comparison); each algorithm reads its own (`AlgorithmEntry`).
`[method_hparams.<name>]` tables hold the hparams of one algorithm only.
Flags and their help are generated from these dataclasses and the
registries, so the flag help can never drift from the config schema.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Any, Callable, Dict, Optional, Tuple

from tff_meta.algorithms import ALGORITHMS, OPTIMIZERS, Hparams, readers
from tff_meta.algorithms import hparams as hparams_lib
from tff_meta.data import DATASETS
from tff_meta.data.protocol import validate_fraction
from tff_meta.models import MODELS
from tff_meta.program import config_checks, privacy


class ConfigError(ValueError):
  """A config value that is wrong; the message names the key and the fix."""


@dataclasses.dataclass
class ExperimentConfig:
  name: str = 'experiment'
  algorithm: str = 'fedmeta_maml'
  algorithms: str = ''
  dataset: str = 'digits'
  model: str = 'mlp'
  rounds: int = 100
  clients_per_round: int = 4
  support_fraction: float = 0.2
  resample_support: bool = False
  min_samples: int = 2
  client_split: Tuple[float, float, float] = (0.8, 0.1, 0.1)
  known_test_fraction: float = 0.0
  final_eval_rounds: int = 1
  seed: int = 0
  eval_every: int = 10
  checkpoint_every: int = 10
  rounds_per_call: int = 1
  resident_state: bool = True
  # Differential privacy and secure aggregation of the update (tff_meta/program/privacy.py).
  dp_noise_multiplier: float = 0.0
  dp_clip: str = ''
  dp_clip_quantile: float = 0.5
  dp_delta: float = 0.0
  secure_aggregation: bool = False
  output_dir: str = ''
  data: Dict[str, Any] = dataclasses.field(default_factory=dict)
  model_options: Dict[str, Any] = dataclasses.field(default_factory=dict)
  hparams: Hparams = dataclasses.field(default_factory=Hparams)
  # Per-algorithm [method_hparams.<name>] tables: hparams that differ by method in a
  # comparison (e.g. each method's validation-selected learning rate).
  method_hparams: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)

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
    validate_fraction('support_fraction', self.support_fraction)
    if self.known_test_fraction:
      validate_fraction('known_test_fraction', self.known_test_fraction)
    for key in ('rounds', 'clients_per_round', 'eval_every', 'checkpoint_every',
                'rounds_per_call'):
      if getattr(self, key) < 1:
        raise ConfigError(f'{key} must be >= 1, got {getattr(self, key)}.')
    if self.final_eval_rounds < 1 or self.final_eval_rounds > self.rounds:
      raise ConfigError(f'final_eval_rounds must be in [1, rounds={self.rounds}], '
                        f'got {self.final_eval_rounds}.')
    # Each hparam's range, declared with its field in the algorithm's module.
    hparams_lib.check_fields(self.hparams, ConfigError, optimizers=OPTIMIZERS)
    config_checks.check_values(self, ConfigError)
    try:
      privacy.validate(self)
    except privacy.PrivacyConfigError as e:
      raise ConfigError(str(e)) from None
    return self


HELP = {
    'name': 'Run name; the default output folder is runs/<name>.',
    'rounds': 'Communication rounds (episodes).',
    'clients_per_round': 'Training clients sampled uniformly per round.',
    'support_fraction': 'Fraction p of each client\'s data in its support set, in (0, 1).',
    'resample_support': 'Draw each training client\'s support/query split afresh every round (FedMeta Alg. 1 line 13), seeded by (seed, round, client); same support fraction. Validation and test clients keep their fixed split. No effect on methods that train on all of a client\'s data (FedAvg, ...).',
    'min_samples': 'Clients with fewer samples are filtered out (FedMeta: 10/20/25).',
    'client_split': 'Train/validation/test client fractions, e.g. 0.8,0.1,0.1.',
    'known_test_fraction': 'Fraction of each training client\'s data held out as its local test set, to score known clients (FedEC protocol; 0 = only new clients are scored).',
    'final_eval_rounds': 'Report the mean test accuracy over evaluations at each of the last N rounds (FedEC: 10).',
    'seed': 'Seed for client splits, support/query splits, sampling and initial weights.',
    'eval_every': 'Evaluate on validation and test clients every N rounds.',
    'checkpoint_every': 'Save the server state every N rounds (and at the end).',
    'rounds_per_call': 'Rounds run per TFF call (issue #8: the server state crosses to the worker once per call; same results as 1). Calls end on evaluation and checkpoint rounds. Needs a stateless algorithm on one worker.',
    'resident_state': 'Keep the server state on the TFF worker between rounds and fetch it only on evaluation and checkpoint rounds (default; same results as false). On a pool the state stays on worker 0. Falls back, with a note, with rounds_per_call > 1 and for algorithms with client state on a pool.',
    'dp_noise_multiplier': 'Differential privacy: noise multiplier z; the sum of clipped updates gets N(0, (z * clip)^2) noise (0 = no noise, epsilon = inf). Needs dp_clip. See docs/PRIVACY.md.',
    'dp_clip': 'Differential privacy: L2 clip norm of each client\'s update (meta-gradient, model delta), or "adaptive" (tracks dp_clip_quantile of the norms); empty = no DP. DP makes the mean uniform over the round\'s clients.',
    'dp_clip_quantile': 'Differential privacy with dp_clip = adaptive: the target quantile of update norms left unclipped, in (0, 1).',
    'dp_delta': 'Differential privacy: delta of the reported epsilon; 0 = 1/N^1.1 with N the number of training clients.',
    'secure_aggregation': 'Sum the clients\' updates with TFF\'s secure sum (SecureSumFactory, 32-bit quantization; simulated on this executor). Composes with DP.',
    'output_dir': 'Output folder (metrics, checkpoints, results); default runs/<name>.',
}

TOP_LEVEL = {f.name: f for f in dataclasses.fields(ExperimentConfig)
             if f.name not in ('data', 'model_options', 'hparams', 'method_hparams')}
HPARAMS = {f.name: f for f in dataclasses.fields(Hparams)}


def hparam_help(name: str) -> str:
  """An hparam's help: its field's text and the algorithms that read it (from the registry)."""
  users = readers(name)
  used = 'every algorithm' if len(users) == len(ALGORITHMS.names()) else ', '.join(users)
  return f'{hparams_lib.help_of(HPARAMS[name])} Read by: {used}.'


# Generated from the registries and the hparams dataclasses, so they cannot drift.
HELP.update({
    'algorithm': f'Algorithm registry name ({", ".join(ALGORITHMS.names())}; see README\'s '
                 'catalog).',
    'algorithms': 'Methods programs.compare runs, comma-separated (a TOML list in a config); '
                  'empty = FedMeta\'s five (fedavg,fedavg_meta,fedmeta_maml,fedmeta_fomaml,'
                  'fedmeta_metasgd).',
    'dataset': f'Dataset registry name ({", ".join(DATASETS.names())}; see docs/DATA.md).',
    'model': f'Model registry name ({", ".join(MODELS.names())}).',
})
HELP.update({name: hparam_help(name) for name in HPARAMS})


_BOOL_WORDS = {'true': True, '1': True, 'yes': True, 'on': True,
               'false': False, '0': False, 'no': False, 'off': False}


def coerce_value(field: dataclasses.Field, value: Any, where: str,
                 element_type: type = float) -> Any:
  """`value` as the type of `field`'s default; a ConfigError names `where` if it is not one.

  A tuple field takes a list or a comma-separated string of `element_type`.
  """
  default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
  try:
    if isinstance(default, bool):
      if isinstance(value, str):   # flags arrive as strings: bool('false') would be True
        word = value.strip().lower()
        if word not in _BOOL_WORDS:
          raise ValueError
        return _BOOL_WORDS[word]
      if value not in (0, 1):
        raise ValueError
      return bool(value)
    if isinstance(value, (bool, dict, list)) and isinstance(default, (int, float, str)):
      raise ValueError   # TOML true for a number, or a table/array for a scalar
    if isinstance(default, dict):
      if not isinstance(value, dict):
        raise ValueError
      return dict(value)
    if isinstance(default, int):
      if isinstance(value, float) and not value.is_integer():
        raise ValueError
      return int(value)
    if isinstance(default, float):
      return float(value)
    if isinstance(default, tuple):
      items = value.split(',') if isinstance(value, str) else value
      return tuple(element_type(v) for v in items)
    return str(value)
  except (TypeError, ValueError):
    raise ConfigError(f'{where}: expected a {type(default).__name__}, got {value!r}.') from None


def coerce_dataclass(cls, raw: Dict[str, Any], tuple_types: Optional[Dict[str, type]] = None,
                     source: str = '<dict>', coerce: Callable = coerce_value):
  """`cls(**raw)` for a config dataclass, each value coerced to its field's type.

  `tuple_types` maps each tuple-typed field to its element type (default
  float). `coerce(field, value, where, element_type)` converts one value
  (default `coerce_value`). An unknown key or a bad value raises a
  ConfigError naming `source` and the key.
  """
  fields = {f.name: f for f in dataclasses.fields(cls)}
  tuple_types = tuple_types or {}
  kwargs = {}
  for key, value in raw.items():
    if key not in fields:
      raise ConfigError(f'{source}: unknown key {key!r}; valid keys: {sorted(fields)}.')
    kwargs[key] = coerce(fields[key], value, f'{source}: {key}', tuple_types.get(key, float))
  return cls(**kwargs)


def load_toml(path: str, see: str = 'configs/ for examples') -> Dict[str, Any]:
  """A TOML file as a dict; a missing (`see` names where configs are) or malformed file is a ConfigError."""
  if not os.path.exists(path):
    raise ConfigError(f'Config file {path!r} does not exist; see {see}.')
  try:
    with open(path, 'rb') as f:
      return tomllib.load(f)
  except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
    raise ConfigError(f'{path}: malformed TOML: {e}') from None
  except IsADirectoryError:
    raise ConfigError(f'Config {path!r} is a folder; give a .toml file (see {see}).') from None


def from_dict(raw: Dict[str, Any], source: str = '<dict>') -> ExperimentConfig:
  config_checks.check_tables(raw, source, ConfigError)
  raw = dict(raw)
  data = dict(raw.pop('data', {}))
  model_options = dict(raw.pop('model_options', {}))
  hparams_raw = dict(raw.pop('hparams', {}))
  method_raw = dict(raw.pop('method_hparams', {}))
  kwargs = {}
  for key, value in raw.items():
    if key not in TOP_LEVEL:
      raise ConfigError(f'{source}: unknown key {key!r}; valid keys: {sorted(TOP_LEVEL)} '
                        'and the tables [data], [model_options], [hparams].')
    if key == 'algorithms' and isinstance(value, list):
      value = ','.join(str(v) for v in value)
    kwargs[key] = coerce_value(TOP_LEVEL[key], value, f'{source}: {key}')
  hp = {}
  for key, value in hparams_raw.items():
    if key not in HPARAMS:
      raise ConfigError(f'{source}: unknown [hparams] key {key!r}; valid: {sorted(HPARAMS)}.')
    hp[key] = coerce_value(HPARAMS[key], value, f'{source}: hparams.{key}')
  methods = {}
  for method, values in method_raw.items():
    own = [f.name for f in dataclasses.fields(ALGORITHMS.get(method).hparams)]
    methods[method] = {}
    for key, value in values.items():
      if key not in own:
        raise ConfigError(f'{source}: unknown [method_hparams.{method}] key {key!r}; '
                          f'{method} reads: {sorted(own)}.')
      methods[method][key] = coerce_value(HPARAMS[key], value, f'{source}: method_hparams.{method}.{key}')
  return ExperimentConfig(**kwargs, data=data, model_options=model_options, hparams=Hparams(**hp),
                          method_hparams=methods)


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
    else:
      raise ConfigError(f'Unknown override {key!r}.')
  methods = {m: dict(v) for m, v in cfg.method_hparams.items()}
  for values in methods.values():   # a flag overrides every method's value too
    for key in values:
      if overrides.get(key) is not None:
        values[key] = hp[key]
  return ExperimentConfig(**top, data=data, model_options=dict(cfg.model_options),
                          hparams=Hparams(**hp), method_hparams=methods)


def to_toml(cfg: ExperimentConfig) -> str:
  """A TOML rendering (written next to each run's outputs)."""
  def fmt(v):
    if isinstance(v, str):
      return '"' + v.replace('\\', '\\\\').replace('"', '\\"') + '"'
    if isinstance(v, bool):
      return 'true' if v else 'false'
    if isinstance(v, (list, tuple)):
      return '[' + ', '.join(fmt(x) for x in v) + ']'
    return repr(v)
  lines = [f'{k} = {fmt(getattr(cfg, k))}' for k in TOP_LEVEL]
  tables = [('data', cfg.data), ('model_options', cfg.model_options),
            ('hparams', dataclasses.asdict(cfg.hparams))]
  tables += [(f'method_hparams.{m}', v) for m, v in cfg.method_hparams.items()]
  for table, values in tables:
    lines.append(f'\n[{table}]')
    lines.extend(f'{k} = {fmt(v)}' for k, v in values.items())
  return '\n'.join(lines) + '\n'


def define_flags(flags_module) -> None:
  """Defines --config plus one override flag per config field (default: from the config)."""
  flags_module.DEFINE_string('config', 'configs/demo/digits.toml', 'TOML experiment config.')
  for name, field in list(TOP_LEVEL.items()) + list(HPARAMS.items()):
    default = field.default if field.default is not dataclasses.MISSING else None
    flags_module.DEFINE_string(name, None, f'{HELP[name]} Overrides the config (built-in default {default!r}).')
  flags_module.DEFINE_string('cache_dir', None, 'Overrides [data].cache_dir (TFF sqlite folder).')


def overrides_from_flags(flag_values) -> Dict[str, Any]:
  names = list(TOP_LEVEL) + list(HPARAMS) + ['cache_dir']
  return {n: getattr(flag_values, n) for n in names if getattr(flag_values, n) is not None}
