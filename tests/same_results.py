r"""Four short runs whose results stay the same unless changed on purpose, and their golden files.

Each case runs `programs.train` on data a clone has (the FEMNIST fixture, the embedded
digits, a generated ml-100k folder): the demo, the FEMNIST FedMeta(MAML) Table 2 cell,
a few-round config and a recommendation config, at a few rounds or episodes. What a run
keeps of its result files is everything but the timing and memory columns (`TIMING`) and
the echoed config text (`ECHOED`); paths are written as `<work>` and `<fixtures>`.
`tests/test_same_results.py` runs each case at this checkout and compares the kept values
with `tests/fixtures/same_results/<case>/` (floats to a relative 1e-6, the rest exactly).

Regenerate the golden files after a deliberate change of results (README.md there says
from which commit they came):

  python -m tests.same_results --checkout=<a checkout of the commit> [--cases=demo,...]

The programs run from `--checkout`; this module, its cases and the data it generates are
this checkout's.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

from tests.conftest import FIXTURES, REPO
from tests.recommendation import ml100k_files

GOLDEN = os.path.join(REPO, 'tests', 'fixtures', 'same_results')
TIMING = frozenset({'round_seconds', 'worker_rss_mb', 'seconds', 'train_seconds'})
ECHOED = frozenset({'config'})   # the few-round results.json's copy of its config (an input)
RTOL = 1e-6
COMMON = ('--progress=false', '--output_dir={out}')


def _movielens(work: str) -> None:
  ml100k_files.write(pathlib.Path(work, 'ml'), num_users=20, num_items=40, seed=0)


@dataclasses.dataclass(frozen=True)
class Case:
  """Runs of `programs.train` (output subfolder, flags with {fixtures}, {work}, {out}) and
  the result files kept, relative to the case's output folder."""
  name: str
  runs: Tuple[Tuple[str, Tuple[str, ...]], ...]
  files: Tuple[str, ...]
  make_data: Optional[Callable[[str], None]] = None


_DEMO = ('--config=configs/demo/digits.toml', '--seed=0', '--rounds=4', '--eval_every=2',
         '--checkpoint_every=2')
CASES = (
    Case('demo', tuple((alg, (*_DEMO, f'--algorithm={alg}')) for alg in ('fedavg', 'fedmeta_maml')),
         tuple(f'{alg}/{f}' for alg in ('fedavg', 'fedmeta_maml')
               for f in ('metrics.csv', 'eval.csv', 'results.json'))),
    # The paper's CNN (femnist_cnn), not the MLP: its compile fits in the case's time.
    Case('femnist_maml', (('', ('--config=configs/fedmeta/table2_femnist_p20_maml.toml',
                                '--cache_dir={fixtures}/tff', '--no_download', '--seed=0',
                                '--rounds=4', '--eval_every=2', '--checkpoint_every=2',
                                '--clients_per_round=3')),),
         ('metrics.csv', 'eval.csv', 'results.json')),
    Case('fewround', (('', ('--config=configs/fewround/femnist62_5way_iid.toml',
                            '--data_path={fixtures}/tff', '--no_download',
                            '--methods=frl_distance_gpal,fedavg', '--episodes=2',
                            '--test_episodes=2', '--test_rounds=1', '--select_every=0',
                            '--examples_per_class=6', '--num_clients=3',
                            '--checkpoint_every=2')),),
         ('results.json', 'frl_distance_gpal/metrics.csv')),
    Case('recommendation', (('', ('--config=configs/recommend/movielens_p80.toml',
                                  '--data_path={work}/ml', '--methods=maml,metasgd',
                                  '--episodes=4', '--eval_every=2', '--checkpoint_every=2',
                                  '--inner_steps=2')),),
         ('results.json', 'maml/curve.csv', 'metasgd/curve.csv'), _movielens),
)
BY_NAME = {case.name: case for case in CASES}


def _strip(value, paths: Dict[str, str]):
  """`value` without TIMING / ECHOED keys, each path in `paths` written as its name."""
  if isinstance(value, dict):
    return {k: _strip(v, paths) for k, v in value.items() if k not in TIMING | ECHOED}
  if isinstance(value, list):
    return [_strip(v, paths) for v in value]
  if isinstance(value, str):
    for path, name in paths.items():
      value = value.replace(path, name)
  return value


def kept(path: str, paths: Optional[Dict[str, str]] = None):
  """What a result file keeps: a CSV's {'columns', 'rows'} (a row: column -> text), or the JSON
  value;
  each folder in `paths` is written as its name there."""
  paths = paths or {}
  with open(path) as f:
    if path.endswith('.json'):
      return _strip(json.load(f), paths)
    header, *rows = list(csv.reader(f))
  for n, row in enumerate(rows, 2):
    if len(row) != len(header):
      raise ValueError(f'{path}, line {n}: {len(row)} cells under a header of {len(header)}.')
  keep = [i for i, column in enumerate(header) if column not in TIMING]
  return {'columns': [header[i] for i in keep],
          'rows': [{header[i]: _strip(row[i], paths) for i in keep} for row in rows]}


def run_case(case: Case, checkout: str, work: str, fixtures: str) -> Dict[str, object]:
  """Runs the case's programs in `checkout` on the `fixtures` folder (tests/conftest.py's
  FIXTURES), writing under `work`; the kept result files."""
  if case.make_data:
    case.make_data(work)
  out = os.path.join(work, 'out')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  for sub, flags in case.runs:
    args = [flag.format(fixtures=fixtures, work=work, out=os.path.join(out, sub))
            for flag in (*flags, *COMMON)]
    proc = subprocess.run([sys.executable, '-m', 'programs.train', *args], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
      raise RuntimeError(f'{case.name}: programs.train {" ".join(args)} exited '
                         f'{proc.returncode}:\n{proc.stderr[-3000:]}')
  paths = {fixtures: '<fixtures>', work: '<work>'}
  return {rel: kept(os.path.join(out, rel), paths) for rel in case.files}


def golden(case: Case) -> Dict[str, object]:
  return {rel: kept(os.path.join(GOLDEN, case.name, rel)) for rel in case.files}


def write_golden(case: Case, results: Dict[str, object]) -> None:
  for rel, value in results.items():
    path = os.path.join(GOLDEN, case.name, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', newline='') as f:
      if rel.endswith('.json'):
        f.write(json.dumps(value, indent=1) + '\n')
      else:
        text = io.StringIO()
        writer = csv.DictWriter(text, value['columns'], lineterminator='\n')
        writer.writeheader()
        writer.writerows(value['rows'])
        f.write(text.getvalue())


def _number(cell):
  if isinstance(cell, str):
    for kind in (int, float):
      try:
        return kind(cell)
      except ValueError:
        pass
  return cell


def differences(expected, actual, where: str = '') -> List[str]:
  """One line per kept value that differs: floats beyond a relative RTOL, anything else
  unequal, a key, row or column missing or extra."""
  if isinstance(expected, dict) and isinstance(actual, dict):
    if list(expected) != list(actual):
      return [f'{where}: keys {list(expected)} became {list(actual)}']
    return [d for k in expected for d in differences(expected[k], actual[k], f'{where}/{k}')]
  if isinstance(expected, list) and isinstance(actual, list):
    if len(expected) != len(actual):
      return [f'{where}: {len(expected)} entries became {len(actual)}']
    return [d for i, (e, a) in enumerate(zip(expected, actual))
            for d in differences(e, a, f'{where}[{i}]')]
  e, a = _number(expected), _number(actual)
  numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (e, a))
  if numbers and (isinstance(e, float) or isinstance(a, float)):
    if math.isclose(e, a, rel_tol=RTOL, abs_tol=0.0) or (math.isnan(e) and math.isnan(a)):
      return []
    return [f'{where}: {expected!r} became {actual!r} '
            f'(relative {abs(a - e) / max(abs(e), abs(a)):.2e})']
  return [] if (e == a and type(e) is type(a)) else [f'{where}: {expected!r} became {actual!r}']


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--checkout', default=REPO, help='the checkout whose programs run')
  parser.add_argument('--cases', default=','.join(BY_NAME), help='comma-separated case names')
  args = parser.parse_args(argv)
  for name in args.cases.split(','):
    if name not in BY_NAME:
      parser.exit(2, f'error: no case {name!r}; use some of {",".join(BY_NAME)}\n')
  for name in args.cases.split(','):
    with tempfile.TemporaryDirectory(prefix=f'same_results_{name}_') as work:
      start = time.monotonic()
      results = run_case(BY_NAME[name], os.path.abspath(args.checkout), work, FIXTURES)
      write_golden(BY_NAME[name], results)
    print(f'wrote {os.path.join(GOLDEN, name)} ({time.monotonic() - start:.0f} s)')


if __name__ == '__main__':
  main()
