r"""Reproduces FedMeta Table 2 from its per-cell configs, with the paper's numbers beside ours.

  python -m programs.reproduce                                   # all 36 cells (days on a CPU)
  python -m programs.reproduce --datasets=femnist --supports=20  # one column of the table
  python -m programs.reproduce --datasets=femnist --supports=20 --rounds=200   # a shortened run
  python -m programs.reproduce --datasets=femnist --supports=20 --seeds=0,1,2   # mean ± std
  python -m programs.reproduce --datasets=femnist --supports=20 --methods=fomaml  # Fig. 3's FOMAML

Each cell runs `configs/fedmeta/table2_<dataset>_p<support>_<method>.toml`
through the same training loop as programs/train.py: finished cells are read
back from their results.json, interrupted ones resume from their checkpoints.
Overrides (--rounds, --cache_dir, ...) apply to every cell and are printed with
the table, so shortened runs are labelled as such.
"""

import glob
import json
import os

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from tff_meta.core import run_folder  # noqa: E402
from tff_meta.algorithms import ALGORITHMS  # noqa: E402
from tff_meta.core import tables  # noqa: E402
from tff_meta.classification import config as config_lib  # noqa: E402
from tff_meta.classification import experiment  # noqa: E402
from tff_meta.program import errors, tasks  # noqa: E402

# --methods' names (the cell configs' suffixes) -> the algorithm each cell runs.
METHODS = {'fedavg': 'fedavg', 'fedavg_meta': 'fedavg_meta', 'maml': 'fedmeta_maml',
           'metasgd': 'fedmeta_metasgd', 'fomaml': 'fedmeta_fomaml'}
DEFAULT_METHODS = ('fedavg', 'fedavg_meta', 'maml', 'metasgd')
flags.DEFINE_string('config_dir', 'configs/fedmeta', 'Folder of table2_*.toml cell configs.')
flags.DEFINE_list('datasets', ['femnist', 'shakespeare', 'sent140'], 'Rows of the table to run.')
flags.DEFINE_list('supports', ['20', '50', '90'], 'Support fractions (%) to run.')
flags.DEFINE_list('methods', list(DEFAULT_METHODS), 'Methods to run (also: fomaml, whose cell '
                  'exists for FEMNIST 20% only, for Fig. 3\'s cost comparison).')
flags.DEFINE_list('seeds', ['0'], 'Seeds per cell; seed s > 0 runs in <output_dir>_seed<s>.')
flags.DEFINE_integer('rounds', None, 'Override every cell\'s rounds (a shortened run).')
flags.DEFINE_integer('eval_every', None, 'Override every cell\'s evaluation period.')
flags.DEFINE_string('cache_dir', None, 'Override [data].cache_dir (TFF sqlite folder).')
flags.DEFINE_string('output_root', None, 'Put every cell under this folder instead of its own output_dir.')
flags.DEFINE_bool('progress', True, 'Show progress bars.')
FLAGS = flags.FLAGS


def _paper(config_dir):
  return config_lib.load_toml(os.path.join(config_dir, 'paper_table2.toml'),
                              see='configs/fedmeta/paper_table2.toml in the repository')


def _wall_hours(output_dir):
  """Hours of training rounds over all sessions of a run (metrics.csv round_seconds)."""
  return run_folder.read_total(os.path.join(output_dir, run_folder.METRICS_FILE), 'round_seconds') / 3600


def main(argv):
  del argv
  paper = _paper(FLAGS.config_dir)
  overrides = {'rounds': FLAGS.rounds, 'eval_every': FLAGS.eval_every, 'cache_dir': FLAGS.cache_dir}
  names = {m: ALGORITHMS.get(a).display_name for m, a in METHODS.items()}
  for method in FLAGS.methods:
    if method not in names:
      errors.fail(config_lib.ConfigError(
          f'unknown method {method!r} in --methods; known: {", ".join(names)}'))
  try:
    seeds = [int(s) for s in FLAGS.seeds]
  except ValueError:
    seeds = None
  if not seeds or min(seeds) < 0:
    errors.fail(config_lib.ConfigError(
        f'--seeds must be integers >= 0, e.g. --seeds=0,1,2; got {",".join(FLAGS.seeds)!r}'))
  rows = []
  for dataset in FLAGS.datasets:
    for support in FLAGS.supports:
      for method in FLAGS.methods:
        path = os.path.join(FLAGS.config_dir, f'table2_{dataset}_p{support}_{method}.toml')
        if not os.path.exists(path):
          errors.fail(config_lib.ConfigError(
              f'no config {path}; known: '
              f'{sorted(glob.glob(os.path.join(FLAGS.config_dir, "table2_*.toml")))[:4]}...'))
        try:
          tasks.require('reproduce', tasks.task_of_file(path))
        except ValueError as e:
          errors.fail(e)
        accs, stds, hours = [], [], []
        for seed in seeds:
          try:
            cfg = config_lib.load(path, dict(overrides, seed=seed))
            out = cfg.resolved_output_dir()
            if FLAGS.output_root:
              out = os.path.join(FLAGS.output_root, cfg.name)
            if seed:
              out = f'{out}_seed{seed}'
            cfg = cfg.for_algorithm(cfg.algorithm, out).validate()
          except ValueError as e:   # e.g. an override out of range
            errors.fail(e)
          result = experiment.run(cfg, show_progress=FLAGS.progress)   # errors: errors.run
          accs.append(result.test.accuracy * 100)
          stds.append(result.test.client_std * 100)
          hours.append(_wall_hours(out))
        want = paper.get(dataset, {}).get(method, {}).get(f'p{support}')
        rows.append((dataset, support, method, accs, stds, hours, cfg.rounds, want))
  print('\nFedMeta Table 2: accuracy % on test clients\' query sets (all data points)')
  print(f'overrides: {json.dumps({k: v for k, v in overrides.items() if v is not None})}; '
        f'seeds: {",".join(map(str, seeds))}\n')
  body = []
  for dataset, support, method, accs, stds, hours, rounds, want in rows:
    paper_txt = f'{want[0]:.2f} ± {want[1]:.2f}' if want else 'n/a'
    ours = (f'{np.mean(accs):.2f} ± {np.std(accs):.2f}' if len(accs) > 1 else f'{accs[0]:.2f}')
    body.append([dataset, f'{support}%', names[method], ours, f'{np.mean(stds):.2f}', rounds,
                 f'{np.mean(hours):.2f}', paper_txt])
  print(tables.markdown_table(
      ['Dataset', 'Support', 'Method', 'Ours', 'Client std', 'Rounds', 'Hours/seed', 'Paper'],
      body))


if __name__ == '__main__':
  errors.run(main)
