"""Finished runs scored again on other clients, summarised per method.

`programs.evaluate` writes one JSON per run it re-scores
(`classification/reevaluation.py`): the run's seed, and per evaluation setting a row
with its method, its accuracy over all query points and the accuracy of each
client with the client's id. With `--clients_from` the clients are another
dataset's (e.g. FEMNIST writers the runs never saw), split into support and
query by the run's support fraction and seed, so two runs of one seed score
the same clients on the same query sets.

`summarize` reads a folder of those files and gives, per method: the accuracy
over all query points (mean ± std over seeds), the client mean, and the
method minus a reference method per client, paired within a seed by client
id and pooled over the seeds both have (Student's t 95% CI), as
`groups.paired_difference` does for a run's own test clients.

A row's method is its `label`: the method, with the evaluation setting
appended unless the setting is the run's own or only picks the method (a
FedAvg run scored with finetune_epochs = 0 / 1 is FedAvg / FedAvg(Meta);
`reevaluation.METHOD_KNOBS`).

Reads JSON files only (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_meta.analysis.groups import t_ci95
from tff_meta.analysis import tables
from tff_meta.core.tables import markdown_table, pct

class ScoresError(ValueError):
  """A folder without scores, or a file that is not one of programs.evaluate's."""


@dataclasses.dataclass
class Score:
  """One run scored with one setting."""
  method: str
  seed: int
  accuracy: float
  client_ids: List[str]
  client_accuracies: np.ndarray
  source: str


def read(folder: str) -> Tuple[List[Score], str]:
  """The scores in the *.json files of `folder`, and the clients they were scored on.

  `folder` may name several folders, comma-separated, all scored on the same
  clients (e.g. one per variant of a cell: `supports/p90,supports/p90_resampled`).
  A method whose scores come from more than one of them is split into one
  method per folder, `method [folder name]`, so that variants are never
  averaged as seeds; a method found in one folder keeps its name.
  """
  folders = [f for f in (part.strip() for part in folder.split(',')) if f]
  by_folder = [(f, sorted(glob.glob(os.path.join(f, '*.json')))) for f in folders]
  for f, paths in by_folder:
    if not paths:
      raise ScoresError(f'{f} holds no *.json; write scores there with programs.evaluate '
                        '--output=<folder>/<name> (research/queues/other_writers.sh).')
  if not by_folder:
    raise ScoresError('--scores names no folder; give the folder(s) programs.evaluate wrote '
                      'its JSON files into.')
  scores, clients = _read_paths(', '.join(folders), [p for _, paths in by_folder for p in paths])
  homes: Dict[str, set] = {}
  for s in scores:
    homes.setdefault(s.method, set()).add(os.path.dirname(s.source))
  for s in scores:
    if len(homes[s.method]) > 1:
      s.method = f'{s.method} [{os.path.basename(os.path.normpath(os.path.dirname(s.source)))}]'
  return scores, clients


def _read_paths(folder: str, paths: Sequence[str]) -> Tuple[List[Score], str]:
  scores, splits, unrecorded = [], set(), 0
  for path in paths:
    try:
      with open(path, encoding='utf-8') as f:
        result = json.load(f)
      seed, rows = int(result['seed']), result['rows']
      support = result.get('support_fraction')   # absent in files of older versions
      splits.add(result['split'] + (f', support {support:.0%}' if support is not None else ''))
      unrecorded += support is None
      for row in rows:
        scores.append(Score(row['label'], seed, float(row['accuracy']), list(row['client_ids']),
                            np.asarray(row['client_accuracies'], float), path))
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise ScoresError(f'{path} is not a score file of programs.evaluate (this version writes '
                        f'seed, label, client_ids and client_accuracies): {e!r}.') from None
  if len(splits) > 1:
    again = (f' {unrecorded} file(s) predate the support fraction\'s record: score them again.'
             if 0 < unrecorded < len(paths) else '')
    raise ScoresError(f'{folder} mixes scores on different clients ({", ".join(sorted(splits))}); '
                      f'keep one folder per set of clients.{again}')
  return scores, splits.pop()


def paired(scores: Sequence[Score], reference: Sequence[Score]) -> Optional[Dict[str, float]]:
  """Method minus reference per client in points, paired within a seed by client id and
  pooled over seeds; None when no seed pairs."""
  refs = {s.seed: dict(zip(s.client_ids, s.client_accuracies)) for s in reference}
  diffs, seeds = [], 0
  for s in scores:
    ref = refs.get(s.seed)
    if ref is None or set(ref) != set(s.client_ids):
      continue
    diffs += [100 * (a - ref[c]) for c, a in zip(s.client_ids, s.client_accuracies)]
    seeds += 1
  if not diffs:
    return None
  d = np.asarray(diffs)
  return dict(diff=float(d.mean()), ci95=t_ci95(d), clients=len(d), seeds=seeds)


def summarize(scores: Sequence[Score], reference: Optional[str] = 'FedAvg') -> List[Dict[str, Any]]:
  """One row per method, in order of first appearance."""
  by_method: Dict[str, List[Score]] = {}
  for s in scores:
    by_method.setdefault(s.method, []).append(s)
  for method, group in by_method.items():
    seeds = [s.seed for s in group]
    if len(set(seeds)) != len(seeds):
      raise ScoresError(f'{method} has two scores of one seed ({", ".join(s.source for s in group)}'
                        '); keep one per seed.')
  rows = []
  for method, group in by_method.items():
    acc = 100 * np.asarray([s.accuracy for s in group])
    row = dict(method=method, seeds=sorted(s.seed for s in group), accuracy=float(acc.mean()),
               accuracy_std=tables.seed_std(acc),
               client_mean=float(100 * np.mean(np.concatenate([s.client_accuracies
                                                               for s in group]))))
    if reference in by_method and method != reference:
      pair = paired(group, by_method[reference])
      if pair is not None:
        row.update({f'vs_{k}': v for k, v in pair.items()})
    rows.append(row)
  return rows


def markdown(rows: Sequence[Dict[str, Any]], clients: str, reference: Optional[str]) -> str:
  header = ['Method', 'Seeds', 'Accuracy % (all query points), mean ± std over seeds',
            'Client mean %', f'vs {reference}, per client (95% CI)']
  body = []
  for r in rows:
    vs = (f"{r['vs_diff']:+.2f} ± {r['vs_ci95']:.2f} ({r['vs_clients']} clients, "
          f"{r['vs_seeds']} seed(s))") if 'vs_diff' in r else '—'
    body.append([r['method'], ', '.join(map(str, r['seeds'])),
                 f"{pct(r['accuracy'])} ± {pct(r['accuracy_std'])}", pct(r['client_mean']), vs])
  return f'Scores on {clients} clients\n\n{markdown_table(header, body)}\n'
