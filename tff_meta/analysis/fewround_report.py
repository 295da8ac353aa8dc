"""Few-round learning runs across seeds: Park et al. Tables 1 and 3 with error bars.

`programs.train` writes one run folder per (config, seed): results.json
holds the config (TOML) and, per method, the accuracy of every test episode
after each R in `test_rounds` (`fewround/experiment.py`). This module reads
many such folders (the cells of `research/queues/long_run.sh`, say), groups
them and writes what a reader of Park et al. (2021) compares:

- per setting (dataset, N-way, K clients, IID or not, examples per class,
  meta-training R, scored part) and method: accuracy after R = 1, 2, 3 as the
  mean over seeds ± the sample std over seeds (ddof = 1, `tables.seed_std`), with
  the mean of the per-seed 95% CIs over test episodes (Table 1's "±"), and
  the gain from the smallest to the largest R (Table 3's question: does
  accuracy rise with rounds?);
- the paired difference to a reference method (fine-tuning via FedAvg by
  default) at each R: within a seed every method is tested on the same
  seeded episodes, so the difference is taken episode by episode; per seed
  its mean and 95% CI, and how many seeds' CIs lie above zero;
- figures: accuracy against R (mean ± std over seeds) and the meta-training
  curves (per-episode meta-train query accuracy, `<run>/<method>/metrics.csv`,
  a rolling mean, averaged over seeds).

A seed also draws the class split (`tasks.load_class_split`), so the std over
seeds includes which classes are unseen. Runs of one method whose configs
differ in more than the seed (another meta-update, other rates) are split into
variants named by the keys that differ, never averaged as seeds. Like the rest
of `tff_meta.analysis`, no TensorFlow: it reads files only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tomllib
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.core import provenance, run_folder
from tff_meta.analysis import variants
from tff_meta.analysis.fewround_figures import meta_training_markdown, plot
from tff_meta.analysis import tables
from tff_meta.core.tables import markdown_table, write_csv
from tff_meta.core.files import write_text
from tff_meta.core.run_folder import RESULTS_FILE, RunFolderError

REFERENCE = 'finetune_fedavg'   # Park et al. Table 1's main baseline
Z95 = 1.959963984540054
# Config keys that name the setting (the task every method is scored on).
SETTING_KEYS = ('dataset', 'n_way', 'num_clients', 'iid', 'examples_per_class', 'rounds',
                'eval_part', 'class_split')
# Keys that do not change what a method learns or how it is scored.
_NOT_VARIANT_KEYS = frozenset({'name', 'seed', 'output_dir', 'methods', 'checkpoint_every',
                               'test_rounds', 'test_episodes', 'data', *SETTING_KEYS})


@dataclasses.dataclass
class FewRoundRun:
  """One `programs.train` output folder: its config and one row per method."""
  path: str
  config: Dict[str, Any]
  rows: List[Dict[str, Any]]

  @property
  def seed(self) -> int:
    return int(self.config.get('seed', 0))


@dataclasses.dataclass(frozen=True, order=True)
class Setting:
  key: Tuple
  label: str


@dataclasses.dataclass
class Entry:
  """A method (or a variant of it) in one setting: one (run, row) per seed."""
  setting: Setting
  method: str
  members: List[Tuple[FewRoundRun, Dict[str, Any]]]

  @property
  def seeds(self) -> List[int]:
    return [run.seed for run, _ in self.members]

  def rounds(self) -> List[int]:
    """The R values every seed was tested at."""
    common = set.intersection(*[set(int(r) for r in row['accuracy']) for _, row in self.members])
    return sorted(common)

  def per_seed(self, r: int) -> np.ndarray:
    return np.array([float(row['accuracy'][str(r)]['mean']) for _, row in self.members])

  def episodes(self, seed: int, r: int) -> Optional[np.ndarray]:
    for run, row in self.members:
      if run.seed == seed:
        return np.asarray(row['accuracy'][str(r)]['per_episode'], np.float64)
    return None


def _error(path: str, what: str) -> RunFolderError:
  return RunFolderError(f'run folder {path}: {RESULTS_FILE}: {what}')


def read_run(folder: str) -> Optional[FewRoundRun]:
  """The few-round run in `folder`, or None when its results.json is another program's."""
  path = os.path.join(folder, RESULTS_FILE)
  try:
    with open(path) as f:
      res = json.load(f)
  except (OSError, ValueError) as e:
    raise _error(folder, f'cannot be read as JSON ({e})') from None
  if not (isinstance(res, dict) and isinstance(res.get('results'), list)
          and isinstance(res.get('config'), str)):
    return None
  try:
    config = tomllib.loads(res['config'])
  except tomllib.TOMLDecodeError as e:
    raise _error(folder, f"its 'config' is not TOML ({e})") from None
  if 'test_rounds' not in config or 'n_way' not in config:
    return None
  for row in res['results']:
    acc = row.get('accuracy') if isinstance(row, dict) else None
    if not (isinstance(acc, dict) and 'method' in row and acc and all(
        isinstance(a, dict) and {'mean', 'per_episode'} <= set(a) for a in acc.values())):
      raise _error(folder, "a row has no 'method' and per-R 'accuracy' with 'mean' and "
                   "'per_episode'")
  return FewRoundRun(path=folder, config=config, rows=res['results'])


def find_runs(roots: Sequence[str], skip: Iterable[str] = ()) -> List[FewRoundRun]:
  """Every few-round run folder under `roots` (searched recursively), sorted by path;
  `skip`: real paths of folders not to look into (another task's runs)."""
  runs = []
  for dirpath, _, filenames in run_folder.walk(roots, skip):
    if RESULTS_FILE in filenames:
      run = read_run(dirpath)
      if run is not None:
        runs.append(run)
  return sorted(runs, key=lambda r: r.path)


def setting_of(config: Dict[str, Any]) -> Setting:
  key = tuple(repr(config.get(k)) for k in SETTING_KEYS)
  ways = config.get('n_way', [5])
  ways = '-'.join(str(w) for w in ways) if isinstance(ways, list) else str(ways)
  label = (f"{config.get('dataset')} {ways}-way {'IID' if config.get('iid', True) else 'non-IID'}"
           f", K = {config.get('num_clients')}, {config.get('examples_per_class')} per class, "
           f"meta-trained R = {config.get('rounds')}")
  if config.get('eval_part', 'test') != 'test':
    label += f" ({config.get('eval_part')} classes)"
  return Setting(key=key, label=label)


def _variant_config(config: Dict[str, Any]) -> Dict[str, str]:
  return {k: repr(v) for k, v in config.items() if k not in _NOT_VARIANT_KEYS}


Described = Dict[str, Tuple[Setting, Dict[str, str]]]


def _described(runs: Sequence[FewRoundRun]) -> Described:
  """run path -> (its setting, its variant config), read from its config with the keys an
  older config.toml lacks at their defaults. `group` (and `research/pretraining.py`) key on both;
  `build` reads it once and passes it to both."""
  from tff_meta.fewround.config import toml_defaults  # pylint: disable=g-import-not-at-top
  defaults = toml_defaults()
  out = {}
  for run in runs:
    config = {**defaults, **run.config}
    out[run.path] = (setting_of(config), _variant_config(config))
  return out


def group(runs: Sequence[FewRoundRun], described: Optional[Described] = None
          ) -> Tuple[List[Entry], List[str]]:
  """Entries by setting and method, variants split; returns (entries, notes)."""
  by_key: Dict[Tuple[Setting, str], List[Tuple[FewRoundRun, Dict[str, Any]]]] = {}
  described = _described(runs) if described is None else described
  for run in runs:
    for row in run.rows:
      by_key.setdefault((described[run.path][0], row['method']), []).append((run, row))
  # A method's variants are named across settings, so that one config carries one name in
  # every setting (non-IID's single FRL run is named as its IID variant is).
  by_method: Dict[str, List[Tuple[FewRoundRun, Dict[str, Any]]]] = {}
  for (_, method), members in by_key.items():
    by_method.setdefault(method, []).extend(members)
  label_of = {}
  for method, members in by_method.items():
    flats = [described[run.path][1] for run, _ in members]
    for (run, _), label in zip(members, variants.variant_labels(flats)):
      label_of[(method, run.path)] = label
  entries, notes = [], []
  for (setting, method), members in by_key.items():
    by_label: Dict[str, list] = {}
    for member in members:
      by_label.setdefault(label_of[(method, member[0].path)], []).append(member)
    for label, vmembers in sorted(by_label.items()):
      name = variants.labelled(method, label)
      vmembers.sort(key=lambda m: (m[0].seed, m[0].path))
      dup = variants.repeated([m[0].seed for m in vmembers])
      if dup:
        notes.append(f'{name} ({setting.label}): more than one run of seed(s) {dup}; each is '
                     'counted: ' + ', '.join(m[0].path for m in vmembers if m[0].seed in dup))
      entries.append(Entry(setting=setting, method=name, members=vmembers))
  entries.sort(key=lambda e: (e.setting, e.method))
  return entries, notes


def paired(a: np.ndarray, b: np.ndarray) -> Tuple[float, float]:
  """Mean and 95% CI half-width of a - b over paired test episodes (percent points)."""
  d = 100 * (np.asarray(a, np.float64) - np.asarray(b, np.float64))
  half = Z95 * float(np.std(d, ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else float('nan')
  return float(np.mean(d)), half


def entry_rows(entries: Sequence[Entry], reference: str = REFERENCE) -> List[Dict[str, Any]]:
  """One row per (entry, R): percent accuracy over seeds and the paired difference to `reference`."""
  refs = {e.setting: e for e in entries if e.method == reference}
  out = []
  for e in entries:
    rounds = e.rounds()
    for r in rounds:
      accs = 100 * e.per_seed(r)
      cis = [100 * float(row['accuracy'][str(r)].get('ci95', float('nan'))) for _, row in e.members]
      row = dict(setting=e.setting.label, method=e.method, R=r, seeds=len(accs),
                 seed_list=' '.join(str(s) for s in e.seeds),
                 accuracy=float(np.mean(accs)), std_over_seeds=tables.seed_std(accs),
                 mean_ci95=float(np.mean(cis)),
                 episodes=int(np.mean([len(row['accuracy'][str(r)]['per_episode'])
                                       for _, row in e.members])),
                 gain=(float(np.mean(100 * (e.per_seed(r) - e.per_seed(rounds[0]))))
                       if r != rounds[0] else float('nan')))
      ref = refs.get(e.setting)
      if ref is not None and ref is not e and r in ref.rounds():
        diffs = []
        for seed in e.seeds:
          a, b = e.episodes(seed, r), ref.episodes(seed, r)
          if b is not None and len(a) == len(b):
            diffs.append(paired(a, b))
        if diffs:
          row.update(vs_reference=float(np.mean([d for d, _ in diffs])),
                     vs_reference_seeds=len(diffs),
                     vs_reference_above=sum(d - h > 0 for d, h in diffs),
                     vs_reference_below=sum(d + h < 0 for d, h in diffs),
                     vs_reference_per_seed=' '.join(f'{d:+.2f}±{h:.2f}' for d, h in diffs))
      out.append(row)
  return out


def _acc_cell(row: Dict[str, Any]) -> str:
  return (f"{row['accuracy']:.2f} ± {row['std_over_seeds']:.2f} "
          f"(CI ±{row['mean_ci95']:.2f})")


def _vs_cell(row: Dict[str, Any]) -> str:
  if 'vs_reference' not in row:
    return '—'
  n = row['vs_reference_seeds']
  return (f"{row['vs_reference']:+.2f} (above in {row['vs_reference_above']}/{n}, "
          f"below in {row['vs_reference_below']}/{n})")


def markdown(entries: Sequence[Entry], rows: Sequence[Dict[str, Any]], reference: str) -> str:
  lines = ['# Few-round learning across seeds', '',
           'Accuracy % after R rounds of FL on test episodes of unseen classes: mean over seeds '
           '± std over seeds (ddof = 1), and in brackets the mean over seeds of the 95% CI over '
           'test episodes. Gain: accuracy at this R minus at the smallest R tested, mean over '
           f'seeds. vs {reference}: the paired difference on the same seeded test episodes, '
           'mean over seeds, and in how many seeds its 95% CI lies wholly above / below zero.',
           '']
  for setting in sorted({e.setting for e in entries}):
    srows = [r for r in rows if r['setting'] == setting.label]
    rounds = sorted({r['R'] for r in srows})
    methods = [e.method for e in entries if e.setting == setting]
    cell = {(r['method'], r['R']): r for r in srows}
    lines += [f'## {setting.label}', '']
    header = ['Method', 'Seeds', *[f'R = {k}' for k in rounds]]
    body = []
    for m in methods:
      first = next((cell[(m, k)] for k in rounds if (m, k) in cell), None)
      body.append([m, first['seed_list'] if first else '—',
                   *[_acc_cell(cell[(m, k)]) if (m, k) in cell else '—' for k in rounds]])
    lines += [markdown_table(header, body), '']
    last = rounds[-1]
    header = ['Method', f'Gain R = {rounds[0]} → {last}', f'vs {reference} at R = {last}',
              'per seed (paired, 95% CI)']
    body = [[m, (f"{cell[(m, last)]['gain']:+.2f}" if (m, last) in cell
                 and not math.isnan(cell[(m, last)]['gain']) else '—'),
             _vs_cell(cell[(m, last)]) if (m, last) in cell else '—',
             cell.get((m, last), {}).get('vs_reference_per_seed', '—')] for m in methods]
    lines += [markdown_table(header, body), '']
  return '\n'.join(lines)


def runs_markdown(runs: Sequence[FewRoundRun]) -> str:
  """## Runs: each folder, its seed and the code version(s) that wrote it."""
  return '\n'.join(['## Runs', '', *(f'- {r.path} (seed {r.seed}, {provenance.describe(r.path)})'
                                      for r in runs)])


def build(roots: Sequence[str], output_dir: str, reference: str = REFERENCE) -> Dict[str, Any]:
  """Reads the runs under `roots`; writes report.md, report.csv and the figures to `output_dir`."""
  runs = find_runs(roots)
  if not runs:
    raise RunFolderError(f'--runs: no few-round run folder (results.json of programs.train) '
                         f'under {", ".join(roots)}')
  described = _described(runs)
  entries, notes = group(runs, described)
  rows = entry_rows(entries, reference)
  md = markdown(entries, rows, reference)
  meta = meta_training_markdown(entries)
  if meta is not None:
    md += '\n' + meta
  md += '\n' + runs_markdown(runs)
  os.makedirs(output_dir, exist_ok=True)
  write_text(os.path.join(output_dir, 'report.md'), md + '\n')
  write_csv(rows, os.path.join(output_dir, 'report.csv'))
  files = [os.path.join(output_dir, 'report.md'), os.path.join(output_dir, 'report.csv')]
  files += plot(entries, rows, output_dir)
  return dict(markdown=md, notes=notes, files=files, runs=len(runs))
