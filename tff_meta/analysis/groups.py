"""Runs grouped into the cells of a results table, and the numbers of each cell.

Runs are grouped by method (results.json's summary 'method') and setting
(config's dataset, model and support_fraction); the runs of a group are its
seeds, and a cell is their mean ± sample std (ddof = 1, `tables.seed_std`). Runs of
one method and setting whose configs differ in anything else (rounds, hparams,
clients per round, ...) are split into variants, named after the keys that
differ, so that a sweep folder is never averaged as if it were seeds.

Each group is also compared with FedAvg on the same test clients
(`paired_difference`): within a seed every method is scored on the same
clients and query sets, so the final per-client accuracies pair up.

The cost of a group is measured up to the first evaluation reaching a target
accuracy, FedMeta Fig. 3's (FEMNIST 74%, Shakespeare 38%, Sent140 70%) unless
the user gives one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tff_meta.analysis import tables, variants
from tff_meta.evaluation import fairness
from tff_meta.core.run_folder import Run, RunFolderError, Setting

# FedMeta Fig. 3's targets: FEMNIST 74%, Shakespeare 38%, Sent140 70%.
PAPER_TARGETS = {'emnist': 0.74, 'leaf_femnist': 0.74, 'shakespeare': 0.38,
                 'leaf_shakespeare': 0.38, 'leaf_sent140': 0.70}
# Display order of the known algorithms (the paper's); others follow by name.
METHOD_ORDER = ('fedavg', 'fedavg_meta', 'fedmeta_maml', 'fedmeta_fomaml', 'fedmeta_metasgd')
REFERENCE_ALGORITHM = 'fedavg'   # the paper's baseline, which the report's paired column subtracts
# Config keys that name the group, or do not change what is trained.
_NOT_VARIANT_KEYS = frozenset({'name', 'seed', 'output_dir', 'eval_every', 'checkpoint_every',
                               'method_hparams', 'algorithm', 'dataset', 'model',
                               'support_fraction', 'data.cache_dir', 'data.download',
                               # round paths with identical results (tests check this)
                               'resident_state', 'clients_per_call'})


def _key_defaults() -> Dict[str, Any]:
  """Flattened config key -> its default: a config.toml written before a key existed had the
  config field's default."""
  from tff_meta.core import config_file  # pylint: disable=g-import-not-at-top
  from tff_meta.classification import config as program_config  # pylint: disable=g-import-not-at-top
  return {**config_file.key_defaults(program_config.ExperimentConfig),
          **config_file.key_defaults(program_config.Hparams, prefix='hparams.')}


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


def _flatten(d: Mapping[str, Any], prefix: str = '') -> Dict[str, Any]:
  out = {}
  for k, v in d.items():
    key = f'{prefix}{k}'
    if isinstance(v, Mapping):
      out.update(_flatten(v, key + '.'))
    else:
      out[key] = tuple(v) if isinstance(v, list) else v
  return out


def method_key(algorithm: str) -> Tuple[int, str]:
  """Sort key: the paper's methods in METHOD_ORDER first, then the others by name."""
  return (METHOD_ORDER.index(algorithm) if algorithm in METHOD_ORDER else len(METHOD_ORDER),
          algorithm)


def group_runs(runs: Sequence[Run]) -> Tuple[List[Group], List[str]]:
  """Groups by setting and method (splitting variants); returns (groups, notes)."""
  by_key: Dict[Tuple[Setting, str, str], List[Run]] = {}
  for run in runs:
    by_key.setdefault((run.setting, run.method, run.algorithm), []).append(run)
  groups, notes = [], []
  defaults = _key_defaults()
  for (setting, method, algorithm), members in by_key.items():
    flat = [{k: v for k, v in _flatten(r.config).items()
             if k not in _NOT_VARIANT_KEYS and k.split('.')[0] not in _NOT_VARIANT_KEYS}
            for r in members]
    labels = variants.variant_labels(flat, missing=defaults.get,
                                     name=lambda k: k.removeprefix('hparams.'))
    by_label: Dict[str, List[Run]] = {}
    for run, label in zip(members, labels):
      by_label.setdefault(label, []).append(run)
    for label, vruns in sorted(by_label.items()):
      name = variants.labelled(method, label)
      vruns = sorted(vruns, key=lambda r: (r.seed, r.path))
      dup = variants.repeated([r.seed for r in vruns])
      if dup:
        notes.append(f'{name} on {setting.label}: more than one run with seed(s) {dup} '
                     '(each counts as a run in the mean): '
                     + ', '.join(r.path for r in vruns if r.seed in dup))
      groups.append(Group(setting=setting, algorithm=algorithm, method=name, runs=vruns))
  groups.sort(key=lambda g: (g.setting, method_key(g.algorithm), g.method))
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
      raise RunFolderError(f'--target_accuracy: {part!r} is not a fraction in (0, 1] '
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
  return float(np.mean(values)), tables.seed_std(values)


def group_stats(group: Group, target: Optional[float]) -> Dict[str, Any]:
  """The numbers of one table row. Accuracies in percent; std over runs is ddof = 1."""
  runs = group.runs
  acc, acc_std = _mean_std([float(r.summary['accuracy']) for r in runs])
  pooled = pooled_client_accuracies(group)
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


def late_gain(run: Run, column: str = 'validation_accuracy') -> Optional[Tuple[float, float]]:
  """(mean of `column` over the evaluations in the last quarter of the run's rounds,
  that mean minus the mean over the quarter before), in points.

  About 0 for a run that has converged; clearly above 0 for one still rising at
  its last round, whose final accuracy a longer run would raise. None without
  an evaluation in both quarters.
  """
  points = [(float(h['round']), float(h[column])) for h in run.history
            if np.isfinite(float(h.get(column, float('nan'))))]
  if not points:
    return None
  last = max(r for r, _ in points)
  q4 = [a for r, a in points if r > 0.75 * last]
  q3 = [a for r, a in points if 0.5 * last < r <= 0.75 * last]
  if not q3 or not q4:
    return None
  return 100 * float(np.mean(q4)), 100 * (float(np.mean(q4)) - float(np.mean(q3)))


def late_gain_row(group: Group) -> Optional[Dict[str, Any]]:
  """`late_gain` of a group's runs: the last quarter's level and gain, mean ± std (ddof = 1)."""
  gains = [g for g in (late_gain(r) for r in group.runs) if g is not None]
  if not gains:
    return None
  level, level_std = _mean_std([g[0] for g in gains])
  gain, gain_std = _mean_std([g[1] for g in gains])
  return dict(method=group.method, runs=len(gains), last_quarter=level,
              last_quarter_std=level_std, late_gain=gain, late_gain_std=gain_std)


def t_ci95(d: np.ndarray) -> float:
  """Half-width of the 95% CI of the mean of `d` (Student's t); nan for fewer than 2 values."""
  if len(d) < 2:
    return float('nan')
  from scipy import stats  # pylint: disable=g-import-not-at-top
  return float(stats.t.ppf(0.975, len(d) - 1) * np.std(d, ddof=1) / np.sqrt(len(d)))


def paired_difference(runs: Sequence[Run], reference: Sequence[Run]) -> Optional[Dict[str, Any]]:
  """`runs` minus `reference` runs per test client, in points, pooled over the seeds both ran.

  A seed draws the client split and the support/query division the same way
  for every method (FedMeta Sec. 4.2 keeps the division fixed across
  methods), so within a seed the i-th final per-client accuracy of two
  methods belongs to the same test client and the same query set. Runs whose
  client count or query points differ are not paired. The 95% CI is
  Student's t over the pooled client differences (clients of different
  seeds counted as independent). None when no seed pairs.
  """
  refs = {r.seed: r for r in reference}
  diffs, seeds = [], []
  for run in runs:
    ref = refs.get(run.seed)
    if (ref is None or ref is run or len(ref.client_accuracies) != len(run.client_accuracies)
        or ref.summary.get('query_examples') != run.summary.get('query_examples')):
      continue
    diffs.append(100 * (run.client_accuracies - ref.client_accuracies))
    seeds.append(run.seed)
  if not diffs:
    return None
  d = np.concatenate(diffs)
  d = d[np.isfinite(d)]
  half = t_ci95(d)
  return dict(vs_reference=float(np.mean(d)), vs_reference_ci95=half,
              vs_reference_clients=int(len(d)), vs_reference_seeds=len(seeds))


def _references(groups: Sequence[Group], rows: Sequence[Dict[str, Any]],
                algorithm: str) -> Dict[Setting, Tuple[Group, Dict[str, Any]]]:
  """Per setting, its one group of `algorithm` and its row (none with several variants)."""
  found: Dict[Setting, List[Tuple[Group, Dict[str, Any]]]] = {}
  for g, r in zip(groups, rows):
    if g.algorithm == algorithm:
      found.setdefault(g.setting, []).append((g, r))
  return {s: refs[0] for s, refs in found.items() if len(refs) == 1}


def add_paired_differences(groups: Sequence[Group], rows: Sequence[Dict[str, Any]],
                           reference_algorithm: str = REFERENCE_ALGORITHM) -> None:
  """Adds `paired_difference` to each row, against the setting's one group of
  `reference_algorithm` (none when the setting has no such group, or several variants)."""
  for setting, (ref, _) in _references(groups, rows, reference_algorithm).items():
    for g, row in zip(groups, rows):
      if g.setting == setting and g is not ref:
        row.update(paired_difference(g.runs, ref.runs) or {})


def add_cost_ratios(groups: Sequence[Group], rows: Sequence[Dict[str, Any]],
                    reference_algorithm: str = REFERENCE_ALGORITHM) -> None:
  """Adds FedAvg's MB and GFLOPs to the target divided by each method's (FedMeta Fig. 3: the
  paper reports 2.82-4.33 times fewer bytes for the meta-learners; > 1: fewer than FedAvg)."""
  for setting, (_, ref) in _references(groups, rows, reference_algorithm).items():
    if 'mb_to_target' not in ref:
      continue
    for g, row in zip(groups, rows):
      if g.setting != setting or not row.get('mb_to_target'):   # 0: reached before round 1
        continue
      row['fedavg_mb_ratio'] = ref['mb_to_target'] / row['mb_to_target']
      if row.get('gflops_to_target') and 'gflops_to_target' in ref:
        row['fedavg_gflops_ratio'] = ref['gflops_to_target'] / row['gflops_to_target']


def pooled_client_accuracies(group: Group) -> np.ndarray:
  """The final per-client test accuracies (fractions) of all runs of `group`, finite only."""
  return np.concatenate([fairness.clean(r.client_accuracies) for r in group.runs])


def fairness_rows(groups: Sequence[Group]) -> List[Dict[str, Any]]:
  """Per group: the pooled final per-client accuracies of all its runs, summarized (percent)."""
  out = []
  for g in groups:
    s = fairness.summarize(100 * pooled_client_accuracies(g))
    out.append(dict(setting=g.setting.label, method=g.method, runs=len(g.runs), **s.as_dict()))
  return out
