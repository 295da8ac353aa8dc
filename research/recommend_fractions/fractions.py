"""Chen et al. 2018b Fig. 3: MAML against the training users' support fraction.

Fig. 3 (Sec. 3.1) varies the fraction of each TRAINING user's ratings used as
the support set in meta-training (the test users keep the config's
`support_fraction`, "80% Support"): left, RMSE and Precision@1 after
meta-training against the fraction, MAML solid and NN(pre-trained) dashed;
right, MAML's RMSE against the episodes, one line per fraction.

`run` makes one `experiment.run` per fraction with MAML alone
(`train_support_fraction` = the fraction) and one reference run with the bias
baseline and NN(pre-trained), which do not use the fraction (NN(pre-trained)
steps on all of a training user's ratings), all in one worker pool. Each run
has its own sub-folder (`reference/`, `fraction_0.2/`, ...), so a killed sweep
resumes: a finished run is read back from its `results.json` (if its
`config.toml` is the run's; a finished run of other settings is refused), an
unfinished one resumes from its checkpoints. Outputs beside them: `fractions.csv` (one
row per fraction: rmse, precision@1, precision@3, the kept episode) and
`fractions.png` (the figure; the bias baseline is a dotted line).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence

import pandas as pd

from tff_meta.core import config_file
from tff_meta.core import files
from tff_meta.recommendation import config as config_lib
from tff_meta.recommendation import experiment, movielens_task
from tff_meta.core.run_folder import CONFIG_FILE, RESULTS_FILE
from tff_meta.runtime.pool import WorkerPool

REFERENCE = 'reference'
CSV_FILE = 'fractions.csv'
PLOT_FILE = 'fractions.png'
METRICS = ('rmse', 'precision@1', 'precision@3')
MAML = 'MAML'
NN = 'NN(pre-trained)'


def _folder(fraction: float) -> str:
  return f'fraction_{fraction:g}'


def _finished(cfg: config_lib.RecommendConfig) -> Optional[Dict]:
  """A finished run's results.json, if the run in cfg's folder is this one (its config.toml
  is cfg's); a finished run of other settings is refused, never read back."""
  out = cfg.output_dir
  path = os.path.join(out, RESULTS_FILE)
  if not os.path.exists(path):
    return None
  saved = os.path.join(out, CONFIG_FILE)
  with open(saved, encoding='utf-8') as f:
    if f.read() != config_file.to_toml(cfg):
      raise config_lib.ConfigError(
          f'{out} holds a finished run with other settings ({saved}); use a new --output_dir, '
          f'or delete {out} to run it again.')
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _run_or_read(cfg: config_lib.RecommendConfig, pool, show_progress: bool) -> Dict:
  done = _finished(cfg)
  if done is not None:
    return done
  result = experiment.run(cfg, pool=pool, show_progress=show_progress)
  return {'rows': result.rows, 'curves': result.curves}


def _row(results: Dict, method: str) -> Dict:
  return next(r for r in results['rows'] if r['method'] == method)


def validate(cfg: config_lib.RecommendConfig, fractions: Sequence[float]
             ) -> config_lib.RecommendConfig:
  if cfg.task != 'movielens':
    raise config_lib.ConfigError(f'Fig. 3 is MovieLens\' (task = "movielens"); got task = '
                                 f'"{cfg.task}".')
  if not fractions:
    raise config_lib.ConfigError('--fractions needs at least one fraction, e.g. 0.2,0.4,0.6,0.8.')
  for f in fractions:
    experiment.validate(dataclasses.replace(cfg, train_support_fraction=float(f)))
  return experiment.validate(cfg)


def run(cfg: config_lib.RecommendConfig, fractions: Sequence[float], *,
        pool: Optional[WorkerPool] = None, show_progress: bool = True) -> List[Dict]:
  """The module doc's runs into cfg's output folder; returns the fractions.csv rows."""
  cfg = validate(cfg, fractions)
  out = cfg.resolved_output_dir()
  files.require_folder(out)
  os.makedirs(out, exist_ok=True)
  own = WorkerPool.local(1, log_dir=out) if pool is None else None
  try:
    reference = _run_or_read(dataclasses.replace(
        cfg, methods='bias,nn_pretrained',
        output_dir=os.path.join(out, REFERENCE)), pool or own, show_progress)
    runs = {float(f): _run_or_read(dataclasses.replace(
        cfg, methods='maml', train_support_fraction=float(f),
        output_dir=os.path.join(out, _folder(float(f)))), pool or own, show_progress)
            for f in fractions}
  finally:
    if own is not None:
      own.close()
  rows = [{'fraction': f, **{m: _row(r, MAML)[m] for m in METRICS},
           'selected_episode': _row(r, MAML).get('selected_episode', '')}
          for f, r in sorted(runs.items())]
  files.write_text(os.path.join(out, CSV_FILE), pd.DataFrame(rows).to_csv(index=False))
  plot(rows, {name: _row(reference, name) for name in (movielens_task.BIAS, NN)},
       {f: r['curves'].get(MAML, []) for f, r in sorted(runs.items())},
       os.path.join(out, PLOT_FILE), f'{round(100 * cfg.support_fraction)}% Support')
  return rows


def plot(rows: List[Dict], references: Dict[str, Dict], curves: Dict[float, List[Dict]],
         path: str, title: str) -> None:
  """Fig. 3: RMSE and Precision@1 against the fraction (MAML solid, NN(pre-trained) dashed,
  the bias baseline dotted) and MAML's RMSE curve per fraction."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 3, figsize=(15, 4))
  x = [r['fraction'] for r in rows]
  for ax, metric in zip(axes[:2], ('rmse', 'precision@1')):
    ax.plot(x, [r[metric] for r in rows], 'o-', label=MAML)
    for name, style in ((NN, '--'), (movielens_task.BIAS, ':')):
      ax.axhline(references[name][metric], color='black', linestyle=style, linewidth=1,
                 label=name)
    ax.set_xlabel('support fraction of training users')
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  for fraction, curve in curves.items():
    axes[2].plot([r['episode'] for r in curve], [r['rmse'] for r in curve],
                 label=f'MAML, {round(100 * fraction)}%')
  axes[2].set_xlabel('training episodes')
  axes[2].set_ylabel('rmse (curve users)')
  axes[2].grid(alpha=0.3)
  axes[2].legend(fontsize=8)
  fig.suptitle(f'{title}: training users\' support fraction (Chen et al. 2018b Fig. 3)')
  fig.tight_layout()
  files.save_figure(fig, path, dpi=110)
  plt.close(fig)
