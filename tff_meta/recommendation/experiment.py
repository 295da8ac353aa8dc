"""From a `RecommendConfig` to a table: data -> tasks -> each method -> rows.

`TASKS` maps a task name to its data preparation, its `METHODS` registry and
its table layout, so the program never branches on task or method names.
Every TFF computation runs in the pool's context (a project-owned local
worker by default, stopped by PID). Outputs in the run folder:
`config.toml`, `results.json` (rows, curves and the data's fingerprint), `table.md`, one sub-folder
per trained method (`checkpoints/`, `curve.csv`, `tensorboard/eval/`) and `curve.png` (Fig. 2:
metrics against training episodes).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow_federated as tff
from absl import logging

from tff_meta.core import resume
from tff_meta.core import config_file, provenance
from tff_meta.core import files
from tff_meta.recommendation import config as config_lib
from tff_meta.recommendation import movielens_task, service_task
from tff_meta.core.registry import Registry
from tff_meta.core.run_folder import CONFIG_FILE, CURVE_PLOT_FILE, RESULTS_FILE, TABLE_FILE
from tff_meta.runtime.pool import WorkerPool


@dataclasses.dataclass(frozen=True)
class Task:
  prepare: Callable     # cfg -> data with summary() -> str and fingerprint() -> Optional[str]
  methods: Registry
  default_methods: Tuple[str, ...]
  format_table: Callable
  curve_metrics: Tuple[str, ...]
  settings: Dict[str, str] = dataclasses.field(default_factory=dict)
  reference_methods: Tuple[str, ...] = ()   # drawn as horizontal lines on the curves

  def block_label(self, cfg) -> str:
    return f'{round(100 * cfg.support_fraction)}% Support'


TASKS: Registry = Registry('recommendation task')
TASKS.add('movielens', Task(movielens_task.prepare, movielens_task.METHODS,
                            movielens_task.DEFAULT_METHODS, movielens_task.format_table,
                            ('rmse', 'precision@1', 'precision@3'),
                            reference_methods=(movielens_task.BIAS,)))
TASKS.add('service', Task(service_task.prepare, service_task.METHODS,
                          service_task.DEFAULT_METHODS, service_task.format_table,
                          ('top1', 'top4'), service_task.SETTINGS))


@dataclasses.dataclass
class RecommendResult:
  config: config_lib.RecommendConfig
  rows: List[dict]
  curves: Dict[str, List[dict]]
  data_summary: str

  @property
  def label(self) -> str:
    return TASKS.get(self.config.task).block_label(self.config)


def validate(cfg: config_lib.RecommendConfig) -> config_lib.RecommendConfig:
  """The config's values, task and method names (errors name the valid ones)."""
  task = TASKS.get(cfg.task)
  for name in cfg.method_list or task.default_methods:
    task.methods.get(name)
  return cfg.validate()


def check_folder(cfg: config_lib.RecommendConfig) -> None:
  """Refuses (before the data loads) an output folder that holds a run of other settings;
  `run` checks again when it claims the folder."""
  resume.check_resume(cfg.resolved_output_dir(), tomllib.loads(config_file.to_toml(cfg)),
                          **config_lib.resume_rules())


def check_request(cfg: config_lib.RecommendConfig, data) -> None:
  """Refuses (a ConfigError naming the numbers) more users per episode than training users,
  instead of sampling fewer."""
  if cfg.clients_per_episode > data.num_train_users:
    raise config_lib.ConfigError(
        f'clients_per_episode = {cfg.clients_per_episode} is more than the '
        f'{data.num_train_users} training users of task = {cfg.task!r}; set '
        f'--clients_per_episode to at most {data.num_train_users}.')


def run(cfg: config_lib.RecommendConfig, *, pool: Optional[WorkerPool] = None,
        show_progress: bool = True) -> RecommendResult:
  cfg = validate(cfg)
  task = TASKS.get(cfg.task)
  out = cfg.resolved_output_dir()
  files.require_folder(out)
  saved = config_file.to_toml(cfg)
  check_folder(cfg)
  data = task.prepare(cfg)   # bad data stops the run before it writes anything
  check_request(cfg, data)
  # Creates the folder; one writer at a time; a folder of other settings is refused unchanged.
  resume.claim_for_resume(out, tomllib.loads(saved), **config_lib.resume_rules())
  files.write_text(os.path.join(out, CONFIG_FILE), saved)
  provenance.record(out)
  logging.info('%s', data.summary())
  rows, curves, references = [], {}, {}
  # Under model selection the curves score the validation users, the rows the test users, so a
  # reference line is the reference method's score on the validation users (curve_reference).
  on_validation = cfg.select_on != 'last' and cfg.evaluate_on == 'test'
  own = WorkerPool.local(1, log_dir=out) if pool is None else None
  try:
    with tff.framework.get_context_stack().install((pool or own).context):
      for name in cfg.method_list or task.default_methods:
        results = task.methods.get(name)(cfg, data, show_progress)
        for r in results if isinstance(results, list) else [results]:
          row = r.row()
          if task.settings:
            row = {'setting': task.settings[name], **row}
          rows.append(row)
          if r.curve:
            curves[r.method] = r.curve
          line = r.curve_reference if on_validation else row
          if r.method in task.reference_methods and line is not None:
            references[r.method] = line
  finally:
    if own is not None:
      own.close()
  result = RecommendResult(cfg, rows, curves, data.summary())
  # Every task's prepared data has `fingerprint()`: MovieLens a hash of the ratings and
  # features as loaded, so that reports pool seeds over the same data, not the same path;
  # the service task None (grouped by path).
  files.write_json(os.path.join(out, RESULTS_FILE),
                   {'data': result.data_summary, 'data_fingerprint': data.fingerprint(),
                    'rows': rows,
                    'curves': curves}, indent=2, default=float)
  files.write_text(os.path.join(out, TABLE_FILE), task.format_table([(result.label, rows)]) + '\n')
  if curves:
    plot_curves(curves, task.curve_metrics, os.path.join(out, CURVE_PLOT_FILE),
                result.label + (' (curves: validation users)' if on_validation else ''),
                references)
  return result


def format_results(results: List[RecommendResult]) -> str:
  """One table per task, in the paper's layout, blocks in config order."""
  parts = []
  for name in dict.fromkeys(r.config.task for r in results):
    blocks = [(r.label, r.rows) for r in results if r.config.task == name]
    parts.append(TASKS.get(name).format_table(blocks))
  return '\n\n'.join(parts)


def plot_curves(curves: Dict[str, List[dict]], names: Tuple[str, ...], path: str,
                title: str, references: Optional[Dict[str, dict]] = None) -> None:
  """Fig. 2: each metric against training episodes, one line per method, one colour per method
  in every panel (a panel's first metric solid, the others dashed); each of `references`
  ({method: final metrics}, e.g. the bias baseline) a horizontal black line, dotted for the
  panel's first metric and dash-dotted for the others."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  groups = [names[:1], names[1:]] if len(names) > 1 else [names]
  fig, axes = plt.subplots(1, len(groups), figsize=(5.5 * len(groups), 4), squeeze=False)
  for ax, group in zip(axes[0], groups):
    for colour, (method, rows) in enumerate(curves.items()):
      for metric in group:
        style = '-' if metric == group[0] else '--'
        ax.plot([r['episode'] for r in rows], [r[metric] for r in rows], style,
                color=f'C{colour}', label=f'{method} {metric}' if len(group) > 1 else method)
    for method, row in (references or {}).items():
      for metric in group:
        ax.axhline(row[metric], color='black', linestyle=':' if metric == group[0] else '-.',
                   linewidth=1, label=f'{method} {metric}' if len(group) > 1 else method)
    ax.set_xlabel('training episodes')
    ax.set_ylabel(', '.join(group))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle(title)
  fig.tight_layout()
  files.save_figure(fig, path, dpi=110)
  plt.close(fig)
