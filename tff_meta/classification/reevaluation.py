"""Re-evaluating a finished run's saved state with other evaluation-only settings.

`programs/evaluate.py` reads a run folder that `programs/train.py` wrote:
its `config.toml` rebuilds the data, the protocol's client split, the model
and the algorithm exactly as the run did (`experiment`), and one of its
checkpoints (`checkpoints/program_state_<round>`, the newest by default)
gives the global parameters. Each `Setting` changes only what evaluation
reads - the inner steps of personalization (`eval_inner_steps`), alpha
(`inner_lr`, flag --eval_inner_lr) or FedAvg(Meta)'s fine-tuning epochs
(`finetune_epochs`) - and is scored by the training loop's own evaluation
(`round_evaluation.Evaluation`) on the same clients, with the same seed, as the
run's eval.csv rows. With no setting, it repeats the run's own evaluation,
which gives the run's row back.

FedAvg scores the global model without adaptation and has none of these
hparams; it trains exactly as FedAvg(Meta) (one process, one state), so a
FedAvg run re-evaluated with `finetune_epochs` is scored as FedAvg(Meta)
(FedMeta Sec. 4.2): that many epochs of minibatch training with the client
optimizer on the support set, 0 = FedAvg's own evaluation (the registry entry's
`scored_also_as`).

`clients_from` scores the clients of ANOTHER dataset in place of the run's
test clients: every client of it, each split into support and query by the
run's support fraction and seed (`protocol.split_indices`), e.g. FEMNIST
writers the run never saw (`leaf_femnist:<leaf femnist folder>`, 31
writers outside TFF's file; asked for the cells on other writers).
Its examples must have the run's shape and classes.

`support_fraction` splits the scored clients (test, validation or
`clients_from`) at another support fraction than the run's. The client
partition does not depend on it (`protocol.prepare` draws it from the seed
alone) and each client's permutation is seeded by (seed, client), so the
split is exactly the one a run at that fraction evaluates on. FedAvg and
FedAvg(Meta) train on all of a training client's data (`client_data.full`),
so their training does not read the fraction either: a 20% run scored at 50%
is a 50% cell up to the order of each client's shuffled data. A meta-learner's
training episodes do read it, so its rows are a mismatched evaluation
(trained at one fraction, tested at another), labelled as such.

Nothing in the run folder changes: the program writes only its own
reevaluation.json / .md (`files.write_json`, atomically).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow_federated as tff

from tff_meta.algorithms import ALGORITHMS
from tff_meta.core.tables import markdown_table, pct
from tff_meta.data import protocol
from tff_meta.data.registry import DATASETS, load_dataset
from tff_meta.data.types import DataError, FederatedDataset
from tff_meta.core import checkpoints, files
from tff_meta.core.fields import check_fields
from tff_meta.classification import experiment
from tff_meta.classification import config as config_lib
from tff_meta.classification.config import ConfigError
from tff_meta.classification.round_evaluation import Evaluation
from tff_meta.core.run_folder import (CHECKPOINTS_DIR, CONFIG_FILE, EVAL_FILE,
                                 METRICS_FILE, RESULTS_FILE)

OUTPUT_NAME = 'reevaluation'   # <run_dir>/reevaluation.json and .md by default
RUN_FILES = (CONFIG_FILE, METRICS_FILE, EVAL_FILE, RESULTS_FILE)

# flag -> (the hparam it sets, its type): the evaluation-only knobs of a re-evaluation.
# inner_lr also sets training's alpha, but a re-evaluation trains nothing.
KNOBS: Dict[str, Tuple[str, type]] = {
    'eval_inner_steps': ('eval_inner_steps', int),
    'eval_inner_lr': ('inner_lr', float),
    'finetune_epochs': ('finetune_epochs', int),
}

# Knobs that choose the method rather than vary it: a row's `label` is its method alone when
# its setting is the run's own or sets only these, else the method with its setting.
METHOD_KNOBS = frozenset({'finetune_epochs'})


@dataclasses.dataclass(frozen=True)
class Setting:
  """One evaluation: hparam overrides (name, value); none = the run's own evaluation."""
  overrides: Tuple[Tuple[str, Any], ...] = ()

  @property
  def label(self) -> str:
    return ', '.join(f'{k}={v:g}' for k, v in self.overrides) or 'as run'


def parse_values(flag: str, text: Optional[str]) -> List[Any]:
  """The comma-separated values of knob `flag` (empty/None: none); a ConfigError names it."""
  if not text:
    return []
  _, kind = KNOBS[flag]
  values = []
  for item in text.split(','):
    try:
      value = kind(item.strip())
    except ValueError:
      what = 'an integer' if kind is int else 'a number'
      raise ConfigError(f'--{flag}: {item.strip()!r} is not {what}; give a comma-separated '
                        f'list such as --{flag}=0,1,5.') from None
    if not math.isfinite(value):
      raise ConfigError(f'--{flag}: {item.strip()!r} is not a finite number.')
    values.append(value)
  if len(set(values)) != len(values):
    raise ConfigError(f'--{flag}: {text!r} repeats a value.')
  return values


def settings(values: Dict[str, Sequence[Any]]) -> List[Setting]:
  """Every combination of the knobs' values (flag -> values), or the run's own setting."""
  given = [(KNOBS[flag][0], vals) for flag, vals in values.items() if vals]
  if not given:
    return [Setting()]
  names = [name for name, _ in given]
  return [Setting(tuple(zip(names, combo))) for combo in itertools.product(*(v for _, v in given))]


def load_run_config(run_dir: str, cache_dir: Optional[str] = None) -> config_lib.ExperimentConfig:
  """The config a run saved, with `cache_dir` (if given) as its data folder."""
  if not os.path.isdir(run_dir):
    raise ConfigError(f'--run_dir {run_dir} is not a folder; give the --output_dir of a '
                      'programs.train run.')
  path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.isfile(path):
    raise ConfigError(f'{run_dir} has no {CONFIG_FILE}: it is not a programs.train run folder '
                      '(or the run never started).')
  cfg = config_lib.load(path, {'cache_dir': cache_dir})
  return cfg.for_algorithm(cfg.algorithm, run_dir).validate()


def _untuned(algorithm: str) -> Optional[str]:
  """The entry scored as `algorithm` (FedAvg for FedAvg(Meta)): with finetune_epochs = 0 a row
  is that entry's own evaluation, and named so."""
  return next((n for n in ALGORITHMS.names() if ALGORITHMS.get(n).scored_also_as == algorithm),
              None)


def _reads(algorithm: str) -> set:
  """The hparams `algorithm` reads."""
  return {f.name for f in dataclasses.fields(ALGORITHMS.get(algorithm).hparams)}


def config_for(cfg: config_lib.ExperimentConfig, setting: Setting) -> config_lib.ExperimentConfig:
  """The run's config with `setting`'s hparams, for the algorithm that reads them all: the
  run's own, else the one its entry is `scored_also_as`; a ConfigError names the flags that
  apply."""
  names = {name for name, _ in setting.overrides}
  also = ALGORITHMS.get(cfg.algorithm).scored_also_as
  candidates = [cfg.algorithm] + ([also] if also else [])
  algorithm = next((a for a in candidates if names <= _reads(a)), None)
  if algorithm is None:
    readable = set().union(*map(_reads, candidates))
    wrong = [f'--{flag}' for flag, (hp, _) in KNOBS.items() if hp in names - readable]
    usable = [f'--{flag}' for flag, (hp, _) in KNOBS.items() if hp in readable]
    raise ConfigError(f'{ALGORITHMS.get(cfg.algorithm).display_name} ({cfg.algorithm}) has no '
                      f'{", ".join(wrong)} to set; it takes '
                      f'{", ".join(usable) or "none of these flags"}.')
  hp = dataclasses.replace(cfg.hparams, **dict(setting.overrides))
  check_fields(hp, ConfigError)
  return dataclasses.replace(cfg, algorithm=algorithm, hparams=hp)


FOLDER_OPTIONS = ('path', 'cache_dir', 'data_dir')   # a loader's folder option, first taken


def parse_clients_from(text: Optional[str]) -> Optional[Tuple[str, Dict[str, str]]]:
  """'DATASET[:FOLDER]' -> (dataset, loader options); the folder goes to whichever of
  FOLDER_OPTIONS the dataset's loader takes. None/empty: None."""
  if not text:
    return None
  name, _, folder = text.partition(':')
  if name not in DATASETS:
    raise ConfigError(f'--clients_from={text}: unknown dataset {name!r}; known: '
                      f'{", ".join(DATASETS.names())}.')
  loader = DATASETS.get(name)
  loader = loader.resolve() if hasattr(loader, 'resolve') else loader
  takes = inspect.signature(loader).parameters
  option = next((o for o in FOLDER_OPTIONS if o in takes), None)
  if not folder:
    if option is not None and takes[option].default is inspect.Parameter.empty:
      raise ConfigError(f'--clients_from={text}: dataset {name!r} is read from a folder; write '
                        f'--clients_from={name}:FOLDER.')
    return name, {}
  if option is None:
    raise ConfigError(f'--clients_from={text}: dataset {name!r} reads no folder; write '
                      f'--clients_from={name}.')
  if not os.path.isdir(folder):
    raise ConfigError(f'--clients_from={text}: {folder} is not a folder.')
  return name, {option: folder}


def external_clients(cfg: config_lib.ExperimentConfig, model_data: protocol.ProtocolData,
                     name: str, options: Dict[str, str]) -> List[protocol.ClientSplit]:
  """Every client of dataset `name` with >= max(min_samples, 2) examples, split into support
  and query as the run split its own (support fraction, seed); a ConfigError when its examples
  are not the run's kind."""
  try:
    dataset = load_dataset(name, **options)
  except DataError as e:
    raise ConfigError(f'--clients_from: {e}') from None
  own = model_data.dataset
  if not isinstance(dataset, FederatedDataset):
    raise ConfigError(f'--clients_from: {name} holds ratings, not labelled examples.')
  if (tuple(dataset.element_shape), dataset.num_classes) != (tuple(own.element_shape),
                                                               own.num_classes):
    raise ConfigError(
        f'--clients_from: {name} has {dataset.num_classes} classes of shape '
        f'{tuple(dataset.element_shape)}, but the run\'s model takes {own.num_classes} classes of '
        f'shape {tuple(own.element_shape)}; give a dataset of the run\'s kind.')
  k = max(int(cfg.min_samples), 2)
  clients = protocol.client_splits(
      dataset, sorted(c for c, n in dataset.sizes().items() if n >= k),
      protocol.SplitPlan(cfg.support_fraction, cfg.seed))
  for client in clients:
    client.indices()   # a client too small to split stops here (DataError), before any scoring
  if not clients:
    raise ConfigError(f'--clients_from: no client of {name} has >= {k} examples.')
  return clients


async def load_state(alg, run_dir: str, round_num: Optional[int]):
  root = os.path.join(run_dir, CHECKPOINTS_DIR)
  if not os.path.isdir(root):   # checked first: the state manager would create the folder
    raise checkpoints.CheckpointError(f'{run_dir} has no {CHECKPOINTS_DIR}/ folder: the run '
                                      'saved no checkpoint to re-evaluate.')
  manager = tff.program.FileProgramStateManager(root)
  state, version = await checkpoints.load_latest(manager, root, alg.process.initialize(),
                                                 alg.display_name, version=round_num)
  if state is None:
    raise checkpoints.CheckpointError(f'{root} holds no checkpoint (program_state_<round>).')
  return state, version


def parse_support_fraction(value: Optional[float]) -> Optional[float]:
  """--support_fraction: None (the run's own) or a number in (0, 1); a ConfigError otherwise."""
  if value is None:
    return None
  if not (math.isfinite(value) and 0.0 < value < 1.0):
    raise ConfigError(f'--support_fraction={value:g} is not in (0, 1); give the fraction of each '
                      'client\'s examples that adapts, e.g. --support_fraction=0.5.')
  return float(value)


def reevaluate(cfg: config_lib.ExperimentConfig, run_dir: str, pool, settings_: List[Setting],
               split: str = 'test', round_num: Optional[int] = None,
               clients_from: Optional[Tuple[str, Dict[str, str]]] = None,
               support_fraction: Optional[float] = None) -> Dict[str, Any]:
  """The run's checkpoint of `round_num` (newest: None) scored with each setting on `split`,
  or on the clients of dataset `clients_from` = (name, loader options), each client split at
  `support_fraction` (None: the run's own)."""
  configs = [config_for(cfg, s) for s in settings_]   # bad settings stop before any work
  if clients_from is not None and split != 'test':
    raise ConfigError(f'--split={split} and --clients_from: the other dataset\'s clients are '
                      'scored in place of the test clients; drop --split.')
  trained_fraction = cfg.support_fraction
  if support_fraction is not None:
    cfg = dataclasses.replace(cfg, support_fraction=support_fraction)
  data = experiment.prepare_data(cfg)
  model = experiment.build_model(cfg, data)
  split_label = split
  if clients_from is not None:
    others = external_clients(cfg, data, *clients_from)
    data = dataclasses.replace(data, test=others)
    split_label = f'{clients_from[0]}: all {len(others)}'
  mismatched = cfg.support_fraction != trained_fraction
  rows, state, version = [], None, None
  with tff.framework.get_context_stack().install(pool.context):
    for setting, setting_cfg in zip(settings_, configs):
      alg = experiment.build_algorithm(setting_cfg, model, data)
      if alg.stateful:
        raise ConfigError(f'{alg.display_name} keeps per-client state; re-evaluating it is not '
                          'supported (its evaluation reads the run\'s client states).')
      if state is None:
        state, version = asyncio.run(load_state(alg, run_dir, round_num))
      params = alg.params(state)
      if any(name == 'inner_lr' for name, _ in setting.overrides) and 'rates' in params:
        raise ConfigError(f'{alg.display_name} adapts with the per-parameter rates it learned, '
                          'not inner_lr: --eval_inner_lr does not apply.')
      evaluation = Evaluation(alg, data, pool, cfg.seed)
      splits = {s[0]: s for s in evaluation.splits()}
      if split not in splits:
        raise ConfigError(f'--split={split}: this run has the splits '
                          f'{", ".join(splits)}.')
      summary = evaluation.summary(params, splits[split], version)
      n = len(summary.client_accuracies)
      method = alg.display_name
      untuned = _untuned(alg.name)
      if dict(setting.overrides).get('finetune_epochs') == 0 and untuned:
        method = ALGORITHMS.get(untuned).display_name
      plain = {name for name, _ in setting.overrides} <= METHOD_KNOBS
      label = method if plain else f'{method} ({setting.label})'
      if mismatched and alg.train_data != 'full':   # its training episodes read the fraction
        label += f' [trained at {trained_fraction:.0%} support]'
      rows.append(dict(
          setting=setting.label, method=method, label=label, **dict(setting.overrides),
          accuracy=summary.accuracy, loss=summary.loss, client_mean=summary.client_mean,
          client_std=summary.client_std,
          client_ci95=1.96 * summary.client_std / math.sqrt(n) if n > 1 else float('nan'),
          clients=n, query_examples=summary.num_examples,
          # per client, in the split's order (JSON only): pairs two runs on the same clients
          client_ids=[c.client_id for c in splits[split][1]],
          client_accuracies=[float(a) for a in summary.client_accuracies]))
  return {'run_dir': os.path.abspath(run_dir), 'algorithm': cfg.algorithm, 'seed': cfg.seed,
          'round': version, 'split': split_label, 'support_fraction': cfg.support_fraction,
          'trained_support_fraction': trained_fraction, 'rows': rows}


def markdown(result: Dict[str, Any]) -> str:
  """The result as a Markdown table (percentages; CI = 1.96 std / sqrt(clients))."""
  header = ['Setting', 'Method', 'Accuracy %', 'Client mean ± 95% CI %', 'Client std %', 'Loss',
            'Clients', 'Query examples']
  body = [[r['setting'], r['method'], pct(100 * r['accuracy']),
           f'{pct(100 * r["client_mean"])} ± {pct(100 * r["client_ci95"])}',
           pct(100 * r['client_std']), f'{r["loss"]:.4f}', r['clients'], r['query_examples']]
          for r in result['rows']]
  support = result.get('support_fraction')
  trained = result.get('trained_support_fraction', support)
  title = (f'Re-evaluation of {result["run_dir"]} ({result["algorithm"]}), checkpoint of round '
           f'{result["round"]}, {result["split"]} clients'
           + (f', support {support:.0%}' if support is not None else '')
           + (f' (trained at {trained:.0%})' if trained != support else ''))
  return f'{title}\n\n{markdown_table(header, body)}\n'


def output_paths(run_dir: str, output: Optional[str],
                 with_table: bool = True) -> Tuple[str, Optional[str]]:
  """(json, md) paths: `output` with .json / .md, default <run_dir>/reevaluation; never one of
  the run's own files. md is None when `with_table` is False (the scores alone)."""
  base = output or os.path.join(run_dir, OUTPUT_NAME)
  stem = base[:-len('.json')] if base.endswith('.json') else base[:-3] if base.endswith('.md') \
      else base
  paths = (stem + '.json', stem + '.md')
  for path in paths:
    if (os.path.realpath(os.path.dirname(path) or '.') == os.path.realpath(run_dir)
        and os.path.basename(path) in RUN_FILES):
      raise ConfigError(f'--output={output} would overwrite the run\'s {os.path.basename(path)}; '
                        'choose another name.')
  files.require_folder(os.path.dirname(os.path.abspath(paths[0])))
  return paths if with_table else (paths[0], None)


def write(result: Dict[str, Any], paths: Tuple[str, Optional[str]]) -> None:
  """The scores to paths[0] (JSON) and, unless paths[1] is None, the table to paths[1]."""
  files.write_json(paths[0], result, indent=2, default=float)
  if paths[1]:
    files.write_text(paths[1], markdown(result))
