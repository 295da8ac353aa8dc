"""Recommendation runs across seeds: Chen et al. (2018b) Table 3 with error bars.

`programs.train` writes one run folder per (config, seed): `config.toml`
and `results.json` (`{'data', 'rows', 'curves'}`, one row per method with its
RMSE, Precision@k and NDCG@k on the test users' query sets;
`recommendation/experiment.py`). A seed draws the user split, the support /
query division and the initial weights, so the paper's one-number cells say
little when methods differ by less than the seeds' spread (docs/RESULTS.md).
  This module reads many run folders and writes, per setting (task, data,
support fraction and sampling, scored users) and method:

- each seed's RMSE, and every metric's mean ± std over seeds (ddof = 1, as the
  other reports);
- the paired difference of RMSE to a reference method (NN(pre-trained) by
  default: the method the paper's "Improvement" row compares MAML with) seed
  by seed: within a seed both methods are scored on the same users and query
  ratings, so the difference is taken per seed; its mean, the 95% Student-t
  interval over seeds, and on how many seeds the method is lower;
- on how many seeds each method has the lowest RMSE of the setting.

The data of a setting is the run's `data_fingerprint` (results.json; a hash of
the ratings and features as loaded, `RatingsDataset.fingerprint`) where the
run recorded one, else its `data_path` (runs written before the fingerprint):
the same data at two paths is one setting, and another data set written to a
path that held the first (a generated folder redone with another seed, say)
is another.

The methods of one seed may come from several folders (one seed's methods run
as two commands, say): rows merge by (setting, seed, method). A method whose
seed appears in more than one folder keeps the first folder's row (sorted by
path), and a note says whether the others agree, which makes a rerun at
another code version a reproducibility check. Configs that differ in more than
the seed, the methods and the output folder are variants, reported apart; keys
that only the meta-learners read (`recommendation.config.META_ONLY_KEYS`) split
only their rows (MAML..., Meta-SGD...), so a run that changes such a key still
pairs with the other runs' NN(pre-trained) seed by seed.
Reads files only (no TensorFlow at import; the config defaults that fill older
config.toml files import the recommendation config when grouping).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.core import provenance
from tff_meta.analysis import tables, variants
from tff_meta.analysis.groups import t_ci95
from tff_meta.core.tables import markdown_table, write_csv
from tff_meta.core.files import write_text
from tff_meta.core.run_folder import CONFIG_FILE, RESULTS_FILE, RunFolderError, find_run_folders

REFERENCE = 'NN(pre-trained)'    # Chen et al. 2018b Table 3's "Improvement" compares MAML with it
METRIC = 'rmse'                  # the paper's main column; lower is better
# Columns of the mean table: (row key, title, scale for display)
MEAN_COLUMNS = (('rmse', 'RMSE', 1.0), ('precision@1', 'P@1 %', 100.0),
                ('precision@3', 'P@3 %', 100.0), ('precision@10', 'P@10 %', 100.0),
                ('precision_ge4@1', 'P@1 (rating >= 4) %', 100.0), ('ndcg@10', 'NDCG@10', 1.0))
# Config keys that name the setting: what every method of a table is scored on.
SETTING_KEYS = ('task', 'data_path', 'support_fraction', 'query_fraction', 'support_sampling',
                'train_user_fraction', 'validation_fraction', 'evaluate_on')
_NOT_VARIANT_KEYS = frozenset({'name', 'seed', 'output_dir', 'methods', 'checkpoint_every',
                               *SETTING_KEYS})


@dataclasses.dataclass
class RecommendRun:
  """One `programs.train` output folder: its seed, config and one row per method."""
  path: str
  seed: int
  config: Dict[str, Any]
  rows: List[Dict[str, Any]]
  data_fingerprint: Optional[str] = None


@dataclasses.dataclass
class Entry:
  """A method (or a variant of it) in one setting: {seed: (run, row)}."""
  setting: str
  method: str
  by_seed: Dict[int, Tuple[RecommendRun, Dict[str, Any]]]

  @property
  def seeds(self) -> List[int]:
    return sorted(self.by_seed)

  def values(self, key: str) -> Dict[int, float]:
    return {s: float(row[key]) for s, (_, row) in self.by_seed.items()
            if isinstance(row.get(key), (int, float))}


def read_run(folder: str) -> Optional[RecommendRun]:
  """The recommendation run in `folder`, or None when its results.json is another program's."""
  try:
    with open(os.path.join(folder, RESULTS_FILE)) as f:
      res = json.load(f)
  except (OSError, ValueError) as e:
    raise RunFolderError(f'run folder {folder}: {RESULTS_FILE} cannot be read as JSON ({e})'
                         ) from None
  if not (isinstance(res, dict) and isinstance(res.get('rows'), list) and 'curves' in res):
    return None
  try:
    with open(os.path.join(folder, CONFIG_FILE), 'rb') as f:
      config = tomllib.load(f)
  except OSError:
    return None
  except tomllib.TOMLDecodeError as e:
    raise RunFolderError(f'run folder {folder}: {CONFIG_FILE} is not TOML ({e})') from None
  if 'task' not in config:
    return None
  rows = [r for r in res['rows'] if isinstance(r, dict) and isinstance(r.get('method'), str)]
  if len(rows) != len(res['rows']):
    raise RunFolderError(f"run folder {folder}: {RESULTS_FILE}: a row has no 'method'")
  fingerprint = res.get('data_fingerprint')
  return RecommendRun(path=folder, seed=int(config.get('seed', 0)), config=config, rows=rows,
                      data_fingerprint=fingerprint if isinstance(fingerprint, str) else None)


def find_runs(roots: Sequence[str], skip: Iterable[str] = ()) -> List[RecommendRun]:
  """Every recommendation run folder under `roots` (`run_folder.find_run_folders`), by path;
  `skip`: real paths of folders not to look into (another task's runs)."""
  folders, _ = find_run_folders(roots, skip)
  return sorted((r for r in map(read_run, folders) if r is not None), key=lambda r: r.path)


def setting_label(config: Dict[str, Any], data: Optional[str] = None) -> str:
  """E.g. 'movielens at /data/ml-100k, 80% support, random split'; `data` replaces the path."""
  support = config.get('support_fraction')
  data = data or config.get('data_path') or '(generated)'
  label = (f"{config.get('task')} at {data}, "
           f"{round(100 * float(support)) if support is not None else '?'}% support, "
           f"{config.get('support_sampling')} split")
  if config.get('evaluate_on', 'test') != 'test':
    label += f" ({config.get('evaluate_on')} users)"
  return label


def _defaults() -> Dict[str, Any]:
  from tff_meta.core import config_file  # pylint: disable=g-import-not-at-top
  from tff_meta.recommendation.config import RecommendConfig  # pylint: disable=g-import-not-at-top
  return config_file.key_defaults(RecommendConfig, tuples_as_lists=True)


def _meta_only() -> Tuple[frozenset, Tuple[str, ...]]:
  from tff_meta.recommendation import config  # pylint: disable=g-import-not-at-top
  return config.META_ONLY_KEYS, config.META_METHOD_PREFIXES


def group(runs: Sequence[RecommendRun], defaults: Optional[Dict[str, Any]] = None
          ) -> Tuple[List[Entry], List[str]]:
  """Entries by setting, variant and method, rows merged over folders; returns (entries, notes)."""
  defaults = _defaults() if defaults is None else defaults
  full = [{**defaults, **run.config} for run in runs]
  # the program's order of methods (the paper's), from the runs with the most methods first
  order: Dict[str, int] = {}
  for run in sorted(runs, key=lambda r: -len(r.rows)):
    for row in run.rows:
      order.setdefault(row['method'], len(order))
  # one setting: the same data (fingerprint, else path) and the same label but for the path
  keyed: Dict[Tuple[str, str], List[int]] = {}
  for i, (run, cfg) in enumerate(zip(runs, full)):
    data = run.data_fingerprint or cfg.get('data_path') or '(generated)'
    keyed.setdefault((data, setting_label(cfg, '*')), []).append(i)
  by_setting = {_group_label([full[i] for i in idx], runs[idx[0]].data_fingerprint): idx
                for idx in keyed.values()}
  entries: List[Entry] = []
  notes: List[str] = []
  meta_keys, meta_prefixes = _meta_only()
  for setting, idx in sorted(by_setting.items()):
    flats = [{k: repr(v) for k, v in full[i].items() if k not in _NOT_VARIANT_KEYS} for i in idx]
    labels = variants.variant_labels(flats)
    others = variants.variant_labels([{k: v for k, v in f.items() if k not in meta_keys}
                                      for f in flats])
    merged: Dict[Tuple[str, str], Entry] = {}
    for i, meta_label, other_label in zip(idx, labels, others):
      run = runs[i]
      for row in run.rows:
        variant = meta_label if row['method'].startswith(meta_prefixes) else other_label
        name = variants.labelled(row['method'], variant)
        entry = merged.setdefault((variant, name), Entry(setting, name, {}))
        first = entry.by_seed.get(run.seed)
        if first is None:
          entry.by_seed[run.seed] = (run, row)
        else:
          notes.append(_duplicate_note(setting, name, run.seed, first, (run, row)))
    entries += sorted(merged.values(), key=lambda e: (e.method.split(' [')[0] not in order,
                                                      order.get(e.method.split(' [')[0], 0),
                                                      e.method))
  return entries, notes


def _group_label(configs: Sequence[Dict[str, Any]], fingerprint: Optional[str]) -> str:
  """The setting's label: its data path(s), ' = ' between paths of the same data, and the
  fingerprint's first 8 digits where the runs recorded one."""
  paths = ' = '.join(sorted({c.get('data_path') or '(generated)' for c in configs}))
  return setting_label(configs[0], paths + (f' (data {fingerprint[:8]})' if fingerprint else ''))


def _duplicate_note(setting, name, seed, first, other) -> str:
  a, b = first[1].get(METRIC), other[1].get(METRIC)
  same = 'the same' if a == b else f'{a} against {b}'
  return (f'{name} ({setting}), seed {seed}: in {first[0].path} and {other[0].path}; '
          f'{METRIC} {same}; the first is used')


def entry_rows(entries: Sequence[Entry], reference: str = REFERENCE) -> List[Dict[str, Any]]:
  """One dict per entry: per-seed RMSE, means ± std, paired RMSE difference to `reference`."""
  rows = []
  for e in entries:
    row: Dict[str, Any] = dict(setting=e.setting, method=e.method, seeds=len(e.seeds))
    for key, _, _ in MEAN_COLUMNS:
      vals = list(e.values(key).values())
      if vals:
        row[key] = float(np.mean(vals))
        row[f'{key}_std'] = tables.seed_std(vals)
    row['per_seed'] = {s: v for s, v in sorted(e.values(METRIC).items())}
    peers = [p for p in entries if p.setting == e.setting]
    row['lowest_on'] = sum(
        1 for s, v in row['per_seed'].items()
        if all(v <= p.values(METRIC).get(s, np.inf) for p in peers))
    ref = next((p for p in peers if p.method == reference), None)
    if ref is not None and ref is not e:
      mine, theirs = e.values(METRIC), ref.values(METRIC)
      common = sorted(set(mine) & set(theirs))
      if common:
        d = np.array([mine[s] - theirs[s] for s in common])
        row.update(vs_reference=float(d.mean()), vs_reference_ci95=t_ci95(d),
                   vs_reference_seeds=len(common), vs_reference_lower=int((d < 0).sum()))
    rows.append(row)
  return rows


def _mean_cell(row, key, scale) -> str:
  if key not in row:
    return ''
  digits = 4 if scale == 1.0 else 2
  mean = f'{scale * row[key]:.{digits}f}'
  if row['seeds'] < 2:   # one seed: no spread to show
    return mean
  return f'{mean} ± {scale * row[key + "_std"]:.{digits}f}'


def _vs_cell(row) -> str:
  if 'vs_reference' not in row:
    return ''
  ci = row['vs_reference_ci95']
  ci = f' ± {ci:.4f}' if np.isfinite(ci) else ''
  return (f"{row['vs_reference']:+.4f}{ci} (lower on {row['vs_reference_lower']} of "
          f"{row['vs_reference_seeds']})")


def markdown(rows: Sequence[Dict[str, Any]], reference: str = REFERENCE) -> str:
  """Per setting: per-seed RMSE and the paired column, then every metric's mean ± std."""
  parts = []
  for setting in sorted({r['setting'] for r in rows}):
    mine = [r for r in rows if r['setting'] == setting]
    seeds = sorted({s for r in mine for s in r['per_seed']})
    parts += [f'## {setting}', '',
              markdown_table(
                  ['method', *(f'RMSE seed {s}' for s in seeds), 'mean ± std',
                   f'RMSE − {reference}, per seed: mean ± 95% CI (t)', 'lowest RMSE on'],
                  [[r['method'], *(f"{r['per_seed'][s]:.4f}" if s in r['per_seed'] else ''
                                   for s in seeds),
                    _mean_cell(r, 'rmse', 1.0), _vs_cell(r),
                    f"{r['lowest_on']} of {len(r['per_seed'])}"] for r in mine]),
              '',
              markdown_table(['method', 'seeds', *(t for _, t, _ in MEAN_COLUMNS)],
                             [[r['method'], r['seeds'],
                               *(_mean_cell(r, k, sc) for k, _, sc in MEAN_COLUMNS)]
                              for r in mine]),
              '']
  return '\n'.join(parts)


def runs_markdown(runs: Sequence[RecommendRun]) -> str:
  """## Runs: each folder, its seed, methods and the code version(s) that wrote it."""
  return '\n'.join(['## Runs', '', *(
      f"- {r.path} (seed {r.seed}; {', '.join(row['method'] for row in r.rows)}; "
      f'{provenance.describe(r.path)})' for r in runs)])


def _csv_rows(rows):
  out = []
  for r in rows:
    flat = {k: v for k, v in r.items() if k != 'per_seed'}
    flat.update({f'{METRIC}_seed{s}': v for s, v in r['per_seed'].items()})
    out.append(flat)
  return out


def build(roots: Sequence[str], output_dir: str, reference: str = REFERENCE,
          defaults: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
  """Reads the runs under `roots`; writes report.md and report.csv to `output_dir`."""
  found = find_runs(roots)
  runs = [r for r in found if any(METRIC in row for row in r.rows)]
  notes = [f'{r.path}: no method has {METRIC} (task {r.config.get("task")}); not reported'
           for r in found if r not in runs]
  if not runs:
    raise RunFolderError(f'--runs: no recommendation run folder with {METRIC} (config.toml and '
                         f'results.json of programs.train) under {", ".join(roots)}')
  entries, group_notes = group(runs, defaults)
  notes += group_notes
  if not any(e.method == reference for e in entries):
    notes.append(f'--reference={reference}: no run has this method, so the paired column is '
                 'empty (methods: ' + ', '.join(sorted({e.method for e in entries})) + ')')
  rows = entry_rows(entries, reference)
  md = markdown(rows, reference) + '\n' + runs_markdown(runs)
  os.makedirs(output_dir, exist_ok=True)
  files = [os.path.join(output_dir, 'report.md'), os.path.join(output_dir, 'report.csv')]
  write_text(files[0], md + '\n')
  write_csv(_csv_rows(rows), files[1])
  return dict(markdown=md, notes=notes, files=files, runs=len(runs))
