"""From a config to results: data -> protocol -> model -> algorithm -> training loop.

Programs and notebooks call these; every choice is looked up in a registry.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import tomllib
from typing import Optional

from absl import logging

from tff_meta.core import resume
from tff_meta.algorithms import ALGORITHMS, Algorithm, aggregation
from tff_meta.data import FederatedDataset, load_dataset, protocol
from tff_meta.models import MODELS, ModelSpec, build_model_spec
from tff_meta.core import config_file, run_folder
from tff_meta.classification import config as config_lib
from tff_meta.classification import privacy
from tff_meta.runtime import execution_plan
from tff_meta.core import files, logs
from tff_meta.classification import training_loop
from tff_meta.runtime.pool import WorkerPool


def prepare_data(cfg: config_lib.ExperimentConfig) -> protocol.ProtocolData:
  dataset = load_dataset(cfg.dataset, **cfg.data)
  if not isinstance(dataset, FederatedDataset):
    raise config_lib.ConfigError(
        f'Dataset {cfg.dataset!r} holds ratings, not labelled examples; the classification '
        'algorithms here cannot train on it (recommendation is its own program). '
        'Use programs.data to inspect it.')
  data = protocol.prepare(dataset, support_fraction=cfg.support_fraction,
                          min_samples=cfg.min_samples, client_split=cfg.client_split,
                          seed=cfg.seed, known_test_fraction=cfg.known_test_fraction,
                          draw_clients_count=cfg.draw_clients)
  logging.info('%s', data.summary())
  check_request(cfg, data)
  return data


def check_request(cfg: config_lib.ExperimentConfig, data: protocol.ProtocolData) -> None:
  """Refuses what the data cannot give (a ConfigError naming the numbers) instead of capping
  it: more clients per round than training clients."""
  if cfg.clients_per_round > len(data.train):
    raise config_lib.ConfigError(
        f'clients_per_round = {cfg.clients_per_round} is more than the {len(data.train)} '
        f'training clients of {cfg.dataset} (client_split = {list(cfg.client_split)}, '
        f'min_samples = {cfg.min_samples}); set --clients_per_round to at most '
        f'{len(data.train)}.')


def build_model(cfg: config_lib.ExperimentConfig, data: protocol.ProtocolData) -> ModelSpec:
  ds = data.dataset
  options = dict(cfg.model_options)
  extras = ds.extras
  if 'embeddings' in extras and 'embedding_matrix' not in options:   # Sent140 + GloVe
    options['embedding_matrix'] = extras['embeddings']
  elif 'vocab' in extras and 'vocab_size' not in options:            # Sent140, trained embeddings
    options['vocab_size'] = max(extras['vocab'].values(), default=1) + 1
  builder = MODELS.get(cfg.model)
  try:
    inspect.signature(builder).bind(ds.element_shape, ds.num_classes, **options)
  except TypeError as e:
    takes = [p for p in inspect.signature(builder).parameters][2:]
    raise config_lib.ConfigError(
        f'[model_options] for model {cfg.model!r}: {e}; it takes {", ".join(takes) or "none"}.'
    ) from None
  try:
    return build_model_spec(cfg.model, ds.element_shape, ds.num_classes, x_dtype=ds.x_dtype,
                            seed=cfg.seed, **options)
  except ValueError as e:   # e.g. a layer size Keras rejects
    raise config_lib.ConfigError(f'model {cfg.model!r} with [model_options] '
                                 f'{cfg.model_options}: {e}') from None


def build_algorithm(cfg: config_lib.ExperimentConfig, model: ModelSpec,
                    data: Optional[protocol.ProtocolData] = None) -> Algorithm:
  entry = ALGORITHMS.get(cfg.algorithm)
  # The algorithm's own hparams, with what it takes from the run (e.g. SCAFFOLD's N and |S|).
  hparams = entry.make_hparams(cfg.hparams).for_run(
      num_train_clients=len(data.train) if data is not None else 0,
      clients_per_round=cfg.clients_per_round)
  if not privacy.enabled(cfg):
    return entry(model, hparams)
  # DP / secure aggregation of the update (tff_meta/classification/privacy.py).
  if privacy.dp_enabled(cfg) and not hparams.weighting:
    logs.note('differential privacy: each round\'s updates are averaged uniformly '
                       '(weighting = "uniform"; an example-weighted mean is not DP).')
    hparams = dataclasses.replace(hparams, weighting='uniform')
  try:   # clients_per_round fits the data (check_request)
    alg = entry(model, hparams,
                model_aggregator=privacy.model_aggregator(cfg, cfg.clients_per_round))
  except (aggregation.NotApplicableError, privacy.PrivacyConfigError) as e:
    raise config_lib.ConfigError(str(e)) from None
  if alg.stateful:
    logs.note(f'{alg.display_name}: DP / secure aggregation cover the update it sends; '
                       'its per-client state never leaves the client.')
  return alg


def check_folder(cfg: config_lib.ExperimentConfig) -> None:
  """Refuses early (before the data loads and a worker starts) an output folder that holds a
  run of other settings; `run` checks again when it claims the folder."""
  cfg = cfg.for_algorithm(cfg.algorithm, cfg.output_dir)
  resume.check_resume(cfg.resolved_output_dir(), tomllib.loads(config_file.to_toml(cfg)),
                          **config_lib.resume_rules())


def execution(cfg: config_lib.ExperimentConfig, alg, sized: bool = True
              ) -> execution_plan.ExecutionPlan:
  """How `alg`'s rounds execute (`execution_plan.plan`) from the config's execution keys, the
  local worker sized by the memory budget when this run starts it (`sized`)."""
  return execution_plan.plan(
      alg, resident_state=cfg.resident_state, clients_per_call=cfg.clients_per_call,
      max_concurrent_calls=cfg.max_concurrent_calls,
      worker_memory_mb=cfg.worker_memory_mb if sized else execution_plan.NO_BUDGET,
      clients_per_round=cfg.clients_per_round)


def run(cfg: config_lib.ExperimentConfig, *, data: Optional[protocol.ProtocolData] = None,
        model: Optional[ModelSpec] = None, pool: Optional[WorkerPool] = None,
        show_progress: bool = True, alg=None,
        plan: Optional[execution_plan.ExecutionPlan] = None) -> training_loop.RunResult:
  """Trains `cfg`; `alg` (built from `model` and `data` when None) and `plan` (the execution
  plan the caller started `pool` with; `execution` when None, sized when this run starts its
  own worker)."""
  cfg = cfg.for_algorithm(cfg.algorithm, cfg.output_dir).validate()
  data = data or prepare_data(cfg)
  check_request(cfg, data)   # data built elsewhere too
  model = model or build_model(cfg, data)
  alg = alg or build_algorithm(cfg, model, data)
  plan = plan or execution(cfg, alg, sized=pool is None)
  out = cfg.resolved_output_dir()
  saved = config_file.to_toml(cfg)
  # Another run's folder is refused unchanged; then one writer at a time, before its
  # checkpoints are read.
  resume.claim_for_resume(out, tomllib.loads(saved), **config_lib.resume_rules())
  return training_loop.run(
      alg, data, privacy=privacy.budget(cfg, len(data.train)), rounds=cfg.rounds,
      clients_per_round=cfg.clients_per_round, seed=cfg.seed,
      eval_every=cfg.eval_every, checkpoint_every=cfg.checkpoint_every, output_dir=out,
      final_eval_rounds=cfg.final_eval_rounds, plan=plan, resample_support=cfg.resample_support,
      max_client_examples=cfg.max_client_examples, pool=pool, show_progress=show_progress,
      on_start=lambda: files.write_text(os.path.join(out, run_folder.CONFIG_FILE), saved))
