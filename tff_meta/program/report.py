"""Result tables (Markdown), convergence plots (PNG), and reports over run folders.

`format_table`, `write_csv` and `plot_convergence` serve programs.train and
programs.compare; `build_report` and the functions below it serve programs.report.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import tomllib
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tff_meta.evaluation import fairness
from tff_meta.program.files import atomic_open, save_figure, write_text

COLUMNS = (
    ('method', 'Method', '{}'),
    ('accuracy', 'Accuracy % (all query points)', '{:.2f}'),
    ('accuracy_std', '± across runs', '{:.2f}'),
    ('client_mean', 'Client mean %', '{:.2f}'),
    ('client_std', 'Client std %', '{:.2f}'),
    ('rounds', 'Rounds', '{:d}'),
    ('mb_sent', 'MB sent (up+down)', '{:.2f}'),
    ('train_seconds', 'Train s', '{:.1f}'),
    ('epsilon', 'ε (DP)', '{:.2f}'),   # only for DP runs (issue #18)
)


def format_table(rows: Sequence[Dict]) -> str:
  columns = [c for c in COLUMNS if any(c[0] in r for r in rows)]
  header = '| ' + ' | '.join(title for _, title, _ in columns) + ' |'
  rule = '|' + '|'.join('---' for _ in columns) + '|'
  body = ['| ' + ' | '.join(fmt.format(int(r[k]) if fmt == '{:d}' else r[k])
                            for k, _, fmt in columns) + ' |' for r in rows]
  return '\n'.join([header, rule, *body])


def write_csv(rows: Sequence[Dict], path: str) -> None:
  import pandas as pd  # pylint: disable=g-import-not-at-top
  with atomic_open(path, 'w', newline='') as f:
    pd.DataFrame(list(rows)).to_csv(f, index=False)


def plot_convergence(histories: Dict[str, List[Dict[str, float]]], path: str, title: str = '') -> None:
  """Test accuracy (all query points) against rounds, one line per method."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for method, history in histories.items():
    rounds = [h['round'] for h in history if 'test_accuracy' in h]
    acc = [100 * h['test_accuracy'] for h in history if 'test_accuracy' in h]
    ax.plot(rounds, acc, marker='o', markersize=3, label=method)
  ax.set_xlabel('communication round')
  ax.set_ylabel('test accuracy on query sets (%)')
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  save_figure(fig, path, dpi=120)
  plt.close(fig)


# --------------------------------------------------------------------------------------
# Reports over finished run folders (programs/report.py).
#
# A run folder is any folder holding results.json and config.toml (what
# programs.train, compare, sweep and reproduce write). Runs are grouped by
# method (results.json's summary 'method') and setting (config's dataset,
# model and support_fraction); the runs of a group are its seeds. Runs of one
# method and setting whose configs differ in anything else (rounds, hparams,
# clients per round, ...) are split into variants, named after the keys that
# differ, so that a sweep folder is never averaged as if it were seeds.
# --------------------------------------------------------------------------------------

RESULTS_FILE = 'results.json'
CONFIG_FILE = 'config.toml'
METRICS_FILE = 'metrics.csv'
# FedMeta Fig. 3's targets: FEMNIST 74%, Shakespeare 38%, Sent140 70%.
PAPER_TARGETS = {'emnist': 0.74, 'leaf_femnist': 0.74, 'shakespeare': 0.38,
                 'leaf_shakespeare': 0.38, 'leaf_sent140': 0.70}
# Display order of the known algorithms (the paper's); others follow by name.
METHOD_ORDER = ('fedavg', 'fedavg_meta', 'fedmeta_maml', 'fedmeta_fomaml', 'fedmeta_metasgd')
# Config keys that name the group, or do not change what is trained.
_NOT_VARIANT_KEYS = frozenset({'name', 'seed', 'output_dir', 'eval_every', 'checkpoint_every',
                               'method_hparams', 'algorithm', 'dataset', 'model',
                               'support_fraction', 'data.cache_dir',
                               # round paths with identical results (tests check this)
                               'resident_state', 'rounds_per_call'})
# Keys added after runs were made: a config.toml without one had this value.
_KEY_DEFAULTS = {'resample_support': False}
_REQUIRED_CONFIG = ('algorithm', 'dataset', 'model', 'support_fraction', 'seed')
_SKIP_DIRS = frozenset({'checkpoints', 'tensorboard'})


class ReportError(ValueError):
  """A run folder or flag that cannot be used; the message names the folder and file."""


@dataclasses.dataclass(frozen=True, order=True)
class Setting:
  dataset: str
  model: str
  support_fraction: float

  @property
  def label(self) -> str:
    return f'{self.dataset}, {self.model}, p={100 * self.support_fraction:g}%'


@dataclasses.dataclass
class Run:
  """One finished run folder, read and checked."""
  path: str
  config: Dict[str, Any]
  summary: Dict[str, Any]
  history: List[Dict[str, float]]     # evaluation rows, by round: round, test_accuracy, ...
  client_accuracies: np.ndarray       # final per-client test accuracy (fractions)
  cum_bytes: np.ndarray               # cum_bytes[r - 1]: bytes down + up of rounds 1..r
  cum_flops: Optional[np.ndarray]     # the same for client_flops (NaN from a missing value on)

  @property
  def method(self) -> str:
    return str(self.summary['method'])

  @property
  def algorithm(self) -> str:
    return str(self.config['algorithm'])

  @property
  def seed(self) -> int:
    return int(self.config['seed'])

  @property
  def setting(self) -> Setting:
    return Setting(str(self.config['dataset']), str(self.config['model']),
                   float(self.config['support_fraction']))

  @property
  def has_flops(self) -> bool:
    return self.cum_flops is not None

  def cost_at(self, round_num: int) -> Tuple[float, Optional[float]]:
    """Cumulative (bytes, FLOPs) of rounds 1..round_num; FLOPs None when not recorded."""
    r = int(round_num)
    if r <= 0:
      return 0.0, (0.0 if self.has_flops else None)
    flops = None
    if self.cum_flops is not None and np.isfinite(self.cum_flops[r - 1]):
      flops = float(self.cum_flops[r - 1])
    return float(self.cum_bytes[r - 1]), flops

  def first_round_reaching(self, target: float) -> Optional[int]:
    """The first evaluation round whose test accuracy is >= target (a fraction)."""
    for h in self.history:
      if h.get('test_accuracy', float('nan')) >= target - 1e-9:
        return int(h['round'])
    return None


def _folder_error(folder: str, name: str, what: str) -> ReportError:
  return ReportError(f'run folder {folder}: {name}: {what}')


def _read_config(folder: str) -> Dict[str, Any]:
  path = os.path.join(folder, CONFIG_FILE)
  try:
    with open(path, 'rb') as f:
      cfg = tomllib.load(f)
  except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
    raise _folder_error(folder, CONFIG_FILE, f'cannot be read as TOML ({e})') from None
  missing = [k for k in _REQUIRED_CONFIG if k not in cfg]
  if missing:
    raise _folder_error(folder, CONFIG_FILE, f'has no {", ".join(missing)}')
  try:
    float(cfg['support_fraction']), int(cfg['seed'])
  except (TypeError, ValueError):
    raise _folder_error(folder, CONFIG_FILE, 'support_fraction and seed must be numbers') from None
  return cfg


def _read_results(folder: str):
  path = os.path.join(folder, RESULTS_FILE)
  try:
    with open(path) as f:
      res = json.load(f)
  except (OSError, ValueError) as e:   # json.JSONDecodeError is a ValueError
    raise _folder_error(folder, RESULTS_FILE, f'cannot be read as JSON ({e})') from None
  if not isinstance(res, dict):
    raise _folder_error(folder, RESULTS_FILE, 'is not a JSON object')
  summary, history = res.get('summary'), res.get('history')
  clients = res.get('test_client_accuracies')
  if not isinstance(summary, dict) or 'method' not in summary or 'accuracy' not in summary:
    raise _folder_error(folder, RESULTS_FILE, "has no summary with 'method' and 'accuracy'")
  if not isinstance(history, list) or not all(
      isinstance(h, dict) and 'round' in h and 'test_accuracy' in h for h in history):
    raise _folder_error(folder, RESULTS_FILE,
                        "has no 'history' list of rows with 'round' and 'test_accuracy'")
  if not isinstance(clients, list) or not clients:
    raise _folder_error(folder, RESULTS_FILE, "has no 'test_client_accuracies' list")
  try:
    history = sorted(({k: float(v) for k, v in h.items()} for h in history),
                     key=lambda h: h['round'])
    clients = np.asarray(clients, np.float64)
    float(summary['accuracy'])
  except (TypeError, ValueError):
    raise _folder_error(folder, RESULTS_FILE, 'holds a value that is not a number') from None
  if clients.ndim != 1 or not np.isfinite(clients).any():
    raise _folder_error(folder, RESULTS_FILE,
                        "'test_client_accuracies' holds no finite per-client accuracy")
  return summary, history, clients


def _read_metrics(folder: str):
  """Cumulative bytes (and client FLOPs, when recorded) per round from metrics.csv."""
  path = os.path.join(folder, METRICS_FILE)
  try:
    with open(path, newline='') as f:
      reader = csv.DictReader(f)
      fields = reader.fieldnames or []
      rows = list(reader)
  except (OSError, csv.Error, UnicodeDecodeError) as e:
    raise _folder_error(folder, METRICS_FILE, f'cannot be read ({e})') from None
  missing = [k for k in ('round', 'bytes_down', 'bytes_up') if k not in fields]
  if missing:
    raise _folder_error(folder, METRICS_FILE, f'has no column {", ".join(missing)}')
  has_flops = 'client_flops' in fields
  by_round = {}
  try:
    for row in rows:   # after a resume the last row of a round wins
      flops = row.get('client_flops') if has_flops else None
      by_round[int(float(row['round']))] = (
          float(row['bytes_down']) + float(row['bytes_up']),
          float(flops) if flops not in (None, '') else float('nan'))
  except (TypeError, ValueError):
    raise _folder_error(folder, METRICS_FILE, 'holds a value that is not a number') from None
  rounds = sorted(by_round)
  if rounds != list(range(1, len(rounds) + 1)):
    raise _folder_error(folder, METRICS_FILE,
                        f'rounds are not 1, 2, ... without gaps (found {rounds[:5]}...)')
  cum_bytes = np.cumsum([by_round[r][0] for r in rounds], dtype=np.float64)
  cum_flops = np.cumsum([by_round[r][1] for r in rounds], dtype=np.float64) if has_flops else None
  return cum_bytes, cum_flops


def load_run(folder: str) -> Run:
  """Reads and checks one run folder; ReportError names the folder and the file."""
  config = _read_config(folder)
  summary, history, clients = _read_results(folder)
  cum_bytes, cum_flops = _read_metrics(folder)
  last = int(max((h['round'] for h in history), default=0))
  if last > len(cum_bytes):
    raise _folder_error(folder, METRICS_FILE, f'ends at round {len(cum_bytes)}, but '
                        f'{RESULTS_FILE} has an evaluation at round {last}')
  return Run(path=folder, config=config, summary=summary, history=history,
             client_accuracies=clients, cum_bytes=cum_bytes, cum_flops=cum_flops)


def find_run_folders(roots: Iterable[str]) -> Tuple[List[str], List[str]]:
  """(run folders, unfinished folders) under `roots`, searched recursively.

  A run folder holds results.json and config.toml. A folder with config.toml
  but no results.json is a run still going (or killed): it is listed as
  unfinished and left out. results.json without config.toml is an error.
  """
  found, unfinished, seen = [], [], set()
  for root in roots:
    if not os.path.isdir(root):
      raise ReportError(f'--runs: {root} is not a folder')
    for dirpath, dirnames, filenames in os.walk(root):
      dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
      has_results, has_config = RESULTS_FILE in filenames, CONFIG_FILE in filenames
      if not (has_results or has_config):
        continue
      dirnames[:] = []    # a run folder holds no other runs
      if has_results and not has_config:
        raise _folder_error(dirpath, CONFIG_FILE,
                            f'missing (the folder has {RESULTS_FILE}, so it looks like a run)')
      real = os.path.realpath(dirpath)
      if real in seen:
        continue
      seen.add(real)
      (found if has_results else unfinished).append(dirpath)
  return found, unfinished


def _flatten(d: Mapping[str, Any], prefix: str = '') -> Dict[str, Any]:
  out = {}
  for k, v in d.items():
    key = f'{prefix}{k}'
    if isinstance(v, Mapping):
      out.update(_flatten(v, key + '.'))
    else:
      out[key] = tuple(v) if isinstance(v, list) else v
  return out


@dataclasses.dataclass
class Group:
  """The runs (seeds) of one method, or one variant of it, in one setting."""
  setting: Setting
  algorithm: str
  method: str          # display name, with the variant when there is one
  runs: List[Run]

  @property
  def seeds(self) -> List[int]:
    return sorted(r.seed for r in self.runs)


def _method_key(algorithm: str) -> Tuple[int, str]:
  return (METHOD_ORDER.index(algorithm) if algorithm in METHOD_ORDER else len(METHOD_ORDER),
          algorithm)


def group_runs(runs: Sequence[Run]) -> Tuple[List[Group], List[str]]:
  """Groups by setting and method (splitting variants); returns (groups, notes)."""
  by_key: Dict[Tuple[Setting, str, str], List[Run]] = {}
  for run in runs:
    by_key.setdefault((run.setting, run.method, run.algorithm), []).append(run)
  groups, notes = [], []
  for (setting, method, algorithm), members in by_key.items():
    flat = [{k: v for k, v in {**_KEY_DEFAULTS, **_flatten(r.config)}.items()
             if k not in _NOT_VARIANT_KEYS and k.split('.')[0] not in _NOT_VARIANT_KEYS}
            for r in members]
    keys = sorted(set().union(*flat))
    varying = [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]
    variants: Dict[str, List[Run]] = {}
    for run, f in zip(members, flat):
      label = ', '.join(f'{k.removeprefix("hparams.")}={f.get(k)}' for k in varying)
      variants.setdefault(label, []).append(run)
    for label, vruns in sorted(variants.items()):
      name = f'{method} [{label}]' if label else method
      vruns = sorted(vruns, key=lambda r: (r.seed, r.path))
      seeds = [r.seed for r in vruns]
      dup = sorted({s for s in seeds if seeds.count(s) > 1})
      if dup:
        notes.append(f'{name} on {setting.label}: more than one run with seed(s) {dup} '
                     '(each counts as a run in the mean): '
                     + ', '.join(r.path for r in vruns if r.seed in dup))
      groups.append(Group(setting=setting, algorithm=algorithm, method=name, runs=vruns))
  groups.sort(key=lambda g: (g.setting, _method_key(g.algorithm), g.method))
  return groups, notes


def parse_targets(text: str) -> Dict[Optional[str], float]:
  """'0.74' (every dataset) or 'emnist=0.74,shakespeare=0.38[,0.5]' -> {dataset or None: target}."""
  out: Dict[Optional[str], float] = {}
  for part in (p.strip() for p in (text or '').split(',')):
    if not part:
      continue
    name, _, value = part.rpartition('=')
    try:
      target = float(value)
    except ValueError:
      target = float('nan')
    if not 0 < target <= 1:
      raise ReportError(f'--target_accuracy: {part!r} is not a fraction in (0, 1] '
                        '(write 0.74 for 74%, or dataset=0.74)')
    out[name.strip() or None] = target
  return out


def target_for(setting: Setting, targets: Mapping[Optional[str], float]) -> Optional[float]:
  """The flag's value for the dataset, else its bare value, else FedMeta's target, else None."""
  if setting.dataset in targets:
    return targets[setting.dataset]
  if None in targets:
    return targets[None]
  return PAPER_TARGETS.get(setting.dataset)


def _mean_std(values: Sequence[float]) -> Tuple[float, float]:
  arr = np.asarray(values, np.float64)
  return float(np.mean(arr)), float(np.std(arr))


def group_stats(group: Group, target: Optional[float]) -> Dict[str, Any]:
  """The numbers of one table row. Accuracies in percent; std over runs is ddof=0."""
  runs = group.runs
  acc, acc_std = _mean_std([float(r.summary['accuracy']) for r in runs])
  pooled = np.concatenate([fairness.clean(r.client_accuracies) for r in runs])
  row = dict(
      setting=group.setting.label, method=group.method, algorithm=group.algorithm,
      runs=len(runs), seeds=' '.join(str(s) for s in group.seeds),
      accuracy=acc, accuracy_std=acc_std,
      client_mean=100 * float(np.mean(pooled)), worst10=100 * fairness.worst_mean(pooled),
      rounds=int(max(int(r.summary.get('rounds', r.history[-1]['round'] if r.history else 0))
                     for r in runs)),
      target=target)
  if target is None:
    return row
  reached = [(r, r.first_round_reaching(target)) for r in runs]
  reached = [(r, k) for r, k in reached if k is not None]
  row['reached'] = len(reached)
  if reached:
    costs = [r.cost_at(k) for r, k in reached]
    row['rounds_to_target'], row['rounds_to_target_std'] = _mean_std([k for _, k in reached])
    row['mb_to_target'], row['mb_to_target_std'] = _mean_std([b / 1e6 for b, _ in costs])
    if all(f is not None for _, f in costs):
      row['gflops_to_target'], row['gflops_to_target_std'] = _mean_std([f / 1e9 for _, f in costs])
  return row


def _num(x: float) -> str:
  return f'{x:,.0f}' if abs(x) >= 1000 else f'{x:.4g}'


def _pm(mean: float, std: float, n: int, fmt=_num) -> str:
  return fmt(mean) + (f' ± {fmt(std)}' if n > 1 else '')


def _pct(x: float) -> str:
  return f'{x:.2f}'


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '|'.join('---' for _ in header) + '|']
  lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
  return '\n'.join(lines)


def _cost_cells(row: Dict[str, Any]) -> List[str]:
  """Rounds, MB and GFLOPs to the target: value (mean ± std over the runs that reached it)."""
  if row.get('target') is None:
    return ['—', '—', '—']
  k, n = row['reached'], row['runs']
  if k == 0:
    return ['not reached'] * 3
  part = '' if k == n else f' ({k}/{n} runs)'
  cells = [_pm(row['rounds_to_target'], row['rounds_to_target_std'], k) + part,
           _pm(row['mb_to_target'], row['mb_to_target_std'], k) + part]
  cells.append(_pm(row['gflops_to_target'], row['gflops_to_target_std'], k) + part
               if 'gflops_to_target' in row else 'n/a')
  return cells


def _pct_label(target: Optional[float]) -> str:
  return 'target' if target is None else f'{100 * target:g}%'


def _setting_table(rows: Sequence[Dict[str, Any]], target: Optional[float]) -> str:
  t = _pct_label(target)
  header = ['Method', 'Runs', 'Accuracy % (mean ± std)', 'Client mean %', 'Worst 10% of clients %',
            'Rounds', f'Rounds to {t}', f'MB to {t}', f'GFLOPs to {t}']
  body = [[r['method'], str(r['runs']), f"{_pct(r['accuracy'])} ± {_pct(r['accuracy_std'])}",
           _pct(r['client_mean']), _pct(r['worst10']), str(r['rounds']), *_cost_cells(r)]
          for r in rows]
  return markdown_table(header, body)


def _pivot_table(groups: Sequence[Group], rows: Sequence[Dict[str, Any]]) -> str:
  settings = sorted({g.setting for g in groups})
  methods: List[str] = []
  order = sorted(zip(groups, rows), key=lambda gr: (_method_key(gr[0].algorithm), gr[0].method))
  for g, _ in order:
    if g.method not in methods:
      methods.append(g.method)
  cell = {(g.method, g.setting): f"{_pct(r['accuracy'])} ± {_pct(r['accuracy_std'])} ({r['runs']})"
          for g, r in zip(groups, rows)}
  return markdown_table(['Method', *[s.label for s in settings]],
                        [[m, *[cell.get((m, s), '—') for s in settings]] for m in methods])


def fairness_rows(groups: Sequence[Group]) -> List[Dict[str, Any]]:
  """Per group: the pooled final per-client accuracies of all its runs, summarized (percent)."""
  out = []
  for g in groups:
    pooled = np.concatenate([fairness.clean(r.client_accuracies) for r in g.runs])
    s = fairness.summarize(100 * pooled)
    out.append(dict(setting=g.setting.label, method=g.method, runs=len(g.runs), **s.as_dict()))
  return out


def _fairness_md(groups: Sequence[Group], frows: Sequence[Dict[str, Any]]) -> str:
  lines = ['# Fairness: final per-client test accuracy', '',
           'Each test client\'s accuracy on its query set after the last round, pooled over the '
           'runs (seeds) of each method, in percent. Std is over clients (ddof=0); percentiles '
           'interpolate linearly; "worst 10%" is the mean of the lowest ceil(10% of clients) '
           'accuracies. `fairness.png` shows the kernel density of the same values '
           '(FedMeta Fig. 2, bottom row).', '']
  qs = fairness.PERCENTILES
  header = ['Method', 'Runs', 'Clients', 'Mean', 'Std', *[f'P{q}' for q in qs],
            'Worst 10% (clients)', 'Min', 'Max']
  for setting in sorted({g.setting for g in groups}):
    body = [[r['method'], str(r['runs']), str(r['num_clients']), _pct(r['mean']), _pct(r['std']),
             *[_pct(r[f'p{q}']) for q in qs], f"{_pct(r['worst_mean'])} ({r['worst_count']})",
             _pct(r['min']), _pct(r['max'])]
            for g, r in zip(groups, frows) if g.setting == setting]
    lines += [f'## {setting.label}', '', markdown_table(header, body), '']
  return '\n'.join(lines)


# ------------------------------------ plots ------------------------------------


def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


MAX_LEGEND_INSIDE = 6   # more lines than this: the legend goes below its panel


def _panels(plt, n: int, entries: int = 0, width: float = 6.2, height: float = 4.3):
  """A grid of n panels (3 per row); taller when `entries` legend lines go below each panel."""
  ncols = min(n, 3)
  nrows = math.ceil(n / ncols)
  if entries > MAX_LEGEND_INSIDE:
    height += 0.6 + 0.19 * entries
  fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
  return fig, axes


def _legend(ax, entries: int, loc: str = 'best') -> None:
  if entries > MAX_LEGEND_INSIDE:
    ax.legend(fontsize=7, loc='upper center', bbox_to_anchor=(0.5, -0.14), frameon=False)
  else:
    ax.legend(fontsize=8, loc=loc)


def _entries(groups: Sequence[Group]) -> int:
  """The most methods in one setting."""
  counts: Dict[Setting, int] = {}
  for g in groups:
    counts[g.setting] = counts.get(g.setting, 0) + 1
  return max(counts.values(), default=0)


def _colors(groups: Sequence[Group]) -> Dict[str, Any]:
  import matplotlib  # pylint: disable=g-import-not-at-top
  cmap = matplotlib.colormaps['tab10']
  methods: List[str] = []
  for g in sorted(groups, key=lambda g: (_method_key(g.algorithm), g.method)):
    if g.method not in methods:
      methods.append(g.method)
  return {m: cmap(i % 10) for i, m in enumerate(methods)}


def _linestyles(groups: Sequence[Group]) -> Dict[str, str]:
  """Solid for the first 10 methods, then dashed, ...: colors repeat after 10."""
  order = list(_colors(groups))
  styles = ('-', '--', '-.', ':')
  return {m: styles[(i // 10) % len(styles)] for i, m in enumerate(order)}


def _save(fig, plt, path: str) -> None:
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  save_figure(fig, path, dpi=120)
  plt.close(fig)


def mean_curve(runs: Sequence[Run]) -> Dict[str, np.ndarray]:
  """Test accuracy (%) and cumulative MB at the evaluation rounds all runs share: mean, std."""
  common = sorted(set.intersection(*[{int(h['round']) for h in r.history} for r in runs]))
  acc = np.array([[100 * {int(h['round']): h['test_accuracy'] for h in r.history}[k]
                   for k in common] for r in runs]).reshape(len(runs), len(common))
  mb = np.array([[r.cost_at(k)[0] / 1e6 for k in common] for r in runs]).reshape(acc.shape)
  return dict(rounds=np.array(common), acc=acc.mean(0), acc_std=acc.std(0), mb=mb.mean(0))


def plot_report_convergence(groups: Sequence[Group], path: str, x: str,
                            targets: Mapping[Setting, Optional[float]]) -> None:
  """Test accuracy against rounds (x='rounds') or cumulative MB (x='mb'), one panel per setting."""
  plt = _pyplot()
  settings = sorted({g.setting for g in groups})
  legend_lines = _entries(groups) + 1   # + the target line
  fig, axes = _panels(plt, len(settings), legend_lines)
  colors, styles = _colors(groups), _linestyles(groups)
  for i, setting in enumerate(settings):
    ax = axes.flat[i]
    for g in (g for g in groups if g.setting == setting):
      c = mean_curve(g.runs)
      if not len(c['rounds']):
        continue
      xs = c['rounds'] if x == 'rounds' else c['mb']
      ax.plot(xs, c['acc'], marker='o', markersize=3, color=colors[g.method],
              linestyle=styles[g.method],
              label=f'{g.method} ({len(g.runs)} run{"s" if len(g.runs) > 1 else ""})')
      if len(g.runs) > 1:
        ax.fill_between(xs, c['acc'] - c['acc_std'], c['acc'] + c['acc_std'],
                        color=colors[g.method], alpha=0.15, linewidth=0)
    target = targets.get(setting)
    if target is not None:
      ax.axhline(100 * target, color='grey', linestyle='--', linewidth=1,
                 label=f'target {100 * target:g}%')
    ax.set_title(setting.label)
    ax.set_xlabel('communication round' if x == 'rounds'
                  else 'cumulative MB sent (down + up, all clients)')
    if x == 'rounds':
      ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel('test accuracy on query sets (%)')
    ax.grid(alpha=0.3)
    _legend(ax, legend_lines)
  for ax in axes.flat[len(settings):]:
    ax.set_visible(False)
  fig.suptitle('Test accuracy, mean over runs (band: ± std)', fontsize=11)
  _save(fig, plt, path)


def plot_fairness(groups: Sequence[Group], path: str) -> None:
  """Kernel density of the final per-client test accuracy per method (FedMeta Fig. 2, bottom)."""
  plt = _pyplot()
  settings = sorted({g.setting for g in groups})
  fig, axes = _panels(plt, len(settings), _entries(groups))
  colors, styles = _colors(groups), _linestyles(groups)
  for i, setting in enumerate(settings):
    ax = axes.flat[i]
    members = [g for g in groups if g.setting == setting]
    pooled = [100 * np.concatenate([fairness.clean(r.client_accuracies) for r in g.runs])
              for g in members]
    grid = np.linspace(0.0, 100.0, 501)
    for g, p in zip(members, pooled):
      d = fairness.kde(p, grid=grid, min_bandwidth=1.0, bounds=(0.0, 100.0))
      mean = float(np.mean(p))
      ax.plot(d.grid, d.density, color=colors[g.method], linestyle=styles[g.method],
              label=f'{g.method}: mean {mean:.1f}, std {np.std(p):.1f} ({p.size} clients)')
      ax.fill_between(d.grid, d.density, color=colors[g.method], alpha=0.12, linewidth=0)
      ax.axvline(mean, color=colors[g.method], linestyle=':', linewidth=1)
    ax.set_title(setting.label)
    ax.set_xlabel('final test accuracy of a client (%)')
    ax.set_ylabel('density')
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    low = min(float(p.min()) for p in pooled)
    ax.set_xlim(max(0.0, 10 * math.floor((low - 10) / 10)), 100)
    _legend(ax, _entries(groups), loc='upper left')
  for ax in axes.flat[len(settings):]:
    ax.set_visible(False)
  fig.suptitle('Final per-client test accuracy: kernel density\n'
               '(clients of all runs pooled; reflected at 0 and 100%; dotted: mean)', fontsize=10)
  _save(fig, plt, path)


def plot_cost(groups: Sequence[Group], rows: Sequence[Dict[str, Any]], path: str) -> bool:
  """Bars of MB (and GFLOPs) to the target per method, a column per setting (FedMeta Fig. 3).

  Returns False, writing nothing, when no method reached its target anywhere.
  """
  settings = [s for s in sorted({g.setting for g in groups})
              if any(r.get('reached') for g, r in zip(groups, rows) if g.setting == s)]
  if not settings:
    return False
  any_flops = any('gflops_to_target' in r for r in rows)
  measures = [('mb_to_target', 'MB sent to reach the target (down + up)')]
  if any_flops:
    measures.append(('gflops_to_target', 'client GFLOPs to reach the target'))
  plt = _pyplot()
  fig, axes = plt.subplots(len(measures), len(settings), squeeze=False,
                           figsize=(max(5.5, 1.1 * _entries(groups)) * len(settings),
                                    3.9 * len(measures)))
  colors = _colors(groups)
  for j, setting in enumerate(settings):
    members = [(g, r) for g, r in zip(groups, rows) if g.setting == setting]
    for i, (key, ylabel) in enumerate(measures):
      ax = axes[i][j]
      xs = np.arange(len(members))
      top = max([r.get(key, 0) + r.get(key + '_std', 0) for _, r in members] + [1e-12])
      for x, (g, r) in zip(xs, members):
        if key in r:
          ax.bar(x, r[key], color=colors[g.method],
                 yerr=r[key + '_std'] if r['reached'] > 1 else None, capsize=4)
          note = '' if r['reached'] == r['runs'] else f"{r['reached']}/{r['runs']} runs"
          err = r[key + '_std'] if r['reached'] > 1 else 0.0
          ax.text(x, r[key] + err, f'{_num(r[key])}\n{note}'.rstrip(), ha='center',
                  va='bottom', fontsize=8)
        else:
          why = 'not reached' if not r.get('reached') else 'no FLOPs\nrecorded'
          ax.text(x, 0.02 * top, why, ha='center', va='bottom', fontsize=8, color='dimgrey',
                  rotation=90)
      ax.set_xticks(xs)
      ax.set_xticklabels([g.method for g, _ in members], rotation=25, ha='right', fontsize=8)
      ax.set_ylabel(ylabel, fontsize=9)
      ax.set_ylim(0, top * 1.25)
      ax.grid(axis='y', alpha=0.3)
      if i == 0:
        ax.set_title(f"{setting.label}: to {_pct_label(members[0][1]['target'])}")
  fig.suptitle('Cost to reach the target test accuracy\n(mean ± std over the runs that reach it)',
               fontsize=10)
  _save(fig, plt, path)
  return True


# ------------------------------------ the report ------------------------------------


def build_report(roots: Sequence[str], output_dir: str,
                 target_accuracy: str = '') -> Dict[str, Any]:
  """Reads the run folders under `roots` and writes the report into `output_dir`.

  Returns {'files': [paths written], 'rows': table rows, 'groups': groups,
  'unfinished': folders left out, 'notes': [...], 'markdown': report.md's text}.
  """
  targets_flag = parse_targets(target_accuracy)
  folders, unfinished = find_run_folders(roots)
  if not folders:
    raise ReportError(f'no run folders (a folder holding {RESULTS_FILE} and {CONFIG_FILE}) '
                      f'under {", ".join(roots)}'
                      + (f'; unfinished (no {RESULTS_FILE}): {", ".join(unfinished)}'
                         if unfinished else ''))
  runs = [load_run(f) for f in folders]
  groups, notes = group_runs(runs)
  targets = {s: target_for(s, targets_flag) for s in {g.setting for g in groups}}
  rows = [group_stats(g, targets[g.setting]) for g in groups]
  frows = fairness_rows(groups)
  os.makedirs(output_dir, exist_ok=True)
  files = []

  def out(name):
    path = os.path.join(output_dir, name)
    files.append(path)
    return path

  plot_report_convergence(groups, out('convergence_rounds.png'), 'rounds', targets)
  plot_report_convergence(groups, out('convergence_bytes.png'), 'mb', targets)
  plot_fairness(groups, out('fairness.png'))
  has_cost = plot_cost(groups, rows, os.path.join(output_dir, 'cost.png'))
  if has_cost:
    files.append(os.path.join(output_dir, 'cost.png'))
  elif os.path.exists(os.path.join(output_dir, 'cost.png')):
    os.remove(os.path.join(output_dir, 'cost.png'))   # a stale plot from an earlier report
  write_text(out('fairness.md'), _fairness_md(groups, frows))
  write_csv(rows, out('report.csv'))

  no_flops = any(r.get('reached') and 'gflops_to_target' not in r for r in rows)
  md = ['# Results report', '',
        f'{len(runs)} run folder(s) under {", ".join(roots)}: '
        f'{len({g.method for g in groups})} method(s) × {len(targets)} setting(s) '
        '(dataset, model, support fraction p). Written by `python -m programs.report`.', '',
        'Accuracy is over all query points of the test clients after the last round, in percent: '
        'the mean ± std (ddof=0) over the runs (seeds) of a cell, as in FedMeta Table 2. '
        '"Client mean" is the mean per-client accuracy and "worst 10%" the mean of the lowest '
        'ceil(10%) of clients, over the clients of all runs pooled (as in `fairness.md`). '
        'The cost columns are cumulative over '
        'rounds up to the first evaluation whose test accuracy reaches the target: MB sent down '
        'and up by all sampled clients, and their GFLOPs (`client_flops` in metrics.csv), '
        'averaged over the runs that reach it.', '',
        '## Accuracy % (methods × settings; runs in parentheses)', '',
        _pivot_table(groups, rows), '']
  for setting in sorted(targets):
    t = targets[setting]
    source = ('--target_accuracy' if setting.dataset in targets_flag or None in targets_flag
              else 'FedMeta Fig. 3' if t is not None else None)
    md += [f'## {setting.label}', '',
           (f'Target accuracy {100 * t:g}% (from {source}).' if t is not None else
            f'No target accuracy for {setting.dataset}: pass --target_accuracy=0.xx '
            f'(or {setting.dataset}=0.xx) for the cost columns.'), '',
           _setting_table([r for g, r in zip(groups, rows) if g.setting == setting], t), '']
  if no_flops:
    md += ['"n/a": metrics.csv of these runs has no `client_flops` column.', '']
  md += ['## Figures', '',
         '- `convergence_rounds.png`: test accuracy against rounds, mean over runs.',
         '- `convergence_bytes.png`: test accuracy against cumulative MB sent (down + up).',
         '- `fairness.png`: kernel density of the final per-client accuracy '
         '(FedMeta Fig. 2, bottom row); the numbers are in `fairness.md`.']
  if has_cost:
    md.append('- `cost.png`: MB and GFLOPs to reach the target accuracy (FedMeta Fig. 3).')
  else:
    md.append('- no `cost.png`: no method reached a target accuracy.')
  md += ['', '![accuracy against rounds](convergence_rounds.png)', '',
         '![accuracy against MB](convergence_bytes.png)', '', '![fairness](fairness.png)', '']
  if has_cost:
    md += ['![cost to target](cost.png)', '']
  md += ['## Runs', '']
  md += [f'- {g.method}, {g.setting.label}: '
         + ', '.join(f'{r.path} (seed {r.seed})' for r in g.runs) for g in groups]
  if unfinished or notes:
    md += ['', '## Notes', '']
    md += [f'- left out, unfinished (no {RESULTS_FILE}): {u}' for u in unfinished]
    md += [f'- {n}' for n in notes]
  text = '\n'.join(md) + '\n'
  write_text(out('report.md'), text)
  return dict(files=files, rows=rows, groups=groups, unfinished=unfinished, notes=notes,
              markdown=text)
