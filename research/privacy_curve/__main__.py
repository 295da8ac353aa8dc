r"""Accuracy against epsilon: what user-level differential privacy costs (issue #18, item 5).

  python -m research.privacy_curve --config=configs/privacy/digits.toml --seeds=0,1,2 \
      --figure=docs/figures/privacy_digits.png

For every seed, algorithm and target epsilon (--epsilons; inf is always run)
it trains one run through the training loop of programs/train.py, on the same
client split, initial model and client samples for every cell of a seed. The
epsilon = inf run clips adaptively to the median update norm without noise;
its final clip is the fixed clip of that algorithm's noisy runs, whose noise
multiplier makes the run end at the target epsilon at the config's delta
(research/privacy_curve/curve.py). Writes privacy_curve.csv (one row per
run), privacy_curve.md (mean ± std over seeds) and the figure, atomically.
Finished runs are read back from their privacy_cell.json, so an interrupted
grid continues where it stopped.
"""

import asyncio
import dataclasses
import math
import os

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from tff_meta.algorithms import ALGORITHMS  # noqa: E402
from tff_meta.classification import accounting, experiment  # noqa: E402
from tff_meta.program import errors, executor  # noqa: E402
from tff_meta.core import checkpoints
from tff_meta.classification import config as config_lib  # noqa: E402
from tff_meta.core import tables  # noqa: E402
from tff_meta.core import files  # noqa: E402
from research.privacy_curve import curve as curve  # noqa: E402
from tff_meta.core.run_folder import CHECKPOINTS_DIR  # noqa: E402

flags.DEFINE_string('config', 'configs/privacy/digits.toml', 'TOML experiment config.')
flags.DEFINE_list('algorithms', list(curve.DEFAULT_ALGORITHMS), 'Algorithms, comma-separated.')
flags.DEFINE_string('epsilons', curve.DEFAULT_EPSILONS,
                    'Target epsilons, comma-separated; inf (no noise) is always run.')
flags.DEFINE_string('seeds', '0', 'Seeds, comma-separated (each its own client split).')
flags.DEFINE_integer('rounds', None, 'Override the config\'s rounds.')
flags.DEFINE_string('output_dir', None, 'Folder for the runs and tables (default: the config\'s).')
flags.DEFINE_string('figure', None, 'Path of the figure (default <output_dir>/privacy_curve.png).')
flags.DEFINE_bool('progress', False, 'Show a progress bar per run.')
executor.define_flags(flags)
FLAGS = flags.FLAGS

RECORD = 'privacy_cell.json'
# The settings a finished cell must share with this invocation to be read back.
SAME = ('rounds', 'clients_per_round', 'population', 'delta', 'noise_multiplier')


def read_clip(run_cfg, model, data, pool, folder):
  """The final adaptive clip of a finished run, from its last checkpoint."""
  alg = experiment.build_algorithm(run_cfg, model, data)
  with tff.framework.get_context_stack().install(pool.context):
    initial = alg.process.initialize()
  root = os.path.join(folder, CHECKPOINTS_DIR)
  manager = tff.program.FileProgramStateManager(root)
  state, _ = asyncio.run(checkpoints.load_latest(manager, root, initial, alg.display_name))
  return curve.final_clip(state['aggregator'])


def read_record(folder, expected):
  path = os.path.join(folder, RECORD)
  if not os.path.exists(path):
    return None
  row = _read_json(path)
  for key in SAME:
    if not math.isclose(float(row[key]), float(expected[key]), rel_tol=1e-9):
      raise config_lib.ConfigError(
          f'{path} was run with {key} = {row[key]}, this grid has {expected[key]}; use another '
          '--output_dir, or delete that folder to run the cell again.')
  return row


def _read_json(path):
  import json  # pylint: disable=g-import-not-at-top
  try:
    with open(path) as f:
      return json.load(f)
  except (ValueError, OSError) as e:
    raise config_lib.ConfigError(f'{path} cannot be read ({e}); delete it to run the cell '
                                 'again.') from None


def main(argv):
  del argv
  try:
    targets = curve.parse_epsilons(FLAGS.epsilons)
    seeds = curve.parse_seeds(FLAGS.seeds)
    algorithms = [a.strip() for a in FLAGS.algorithms if a.strip()]
    if not algorithms:
      raise curve.CurveError('--algorithms is empty; e.g. --algorithms=fedavg,fedmeta_maml.')
    for name in algorithms:
      ALGORITHMS.get(name)
    cfg = config_lib.load(FLAGS.config, {'rounds': FLAGS.rounds})
    out = FLAGS.output_dir or cfg.resolved_output_dir()
    figure = FLAGS.figure or os.path.join(out, 'privacy_curve.png')
    for name in algorithms:   # every algorithm must take DP with this config
      config_lib.apply_overrides(cfg, curve.cell_overrides(curve.INF, 0.0, None)).for_algorithm(
          name, out).validate()
    files.require_folder(out)
    files.require_folder(os.path.dirname(os.path.abspath(figure)))
    pool = executor.make_pool(FLAGS, log_dir=out, max_concurrent_calls=cfg.max_concurrent_calls)
  except ValueError as e:
    errors.fail(e)
  rows = []
  with pool:
    for seed in seeds:
      seed_cfg = dataclasses.replace(cfg, seed=seed)
      data = experiment.prepare_data(seed_cfg)
      model = experiment.build_model(seed_cfg, data)
      population = len(data.train)
      m = min(cfg.clients_per_round, population)
      delta = cfg.dp_delta or accounting.default_delta(population)
      print(f'seed {seed}: {population} training clients, {m} per round, {cfg.rounds} rounds, '
            f'delta {delta:g}', flush=True)
      z = {t: curve.noise_multiplier(t, population=population, clients_per_round=m,
                                     rounds=cfg.rounds, delta=delta) for t in targets}
      clip = {}
      for cell in curve.cells(algorithms, [seed], targets):
        folder = cell.folder(out)
        expected = dict(rounds=cfg.rounds, clients_per_round=m, population=population,
                        delta=delta, noise_multiplier=z[cell.target])
        row = read_record(folder, expected)
        if row is None:
          overrides = curve.cell_overrides(cell.target, z[cell.target], clip.get(cell.algorithm))
          run_cfg = config_lib.apply_overrides(seed_cfg, overrides).for_algorithm(
              cell.algorithm, folder).validate()
          result = experiment.run(run_cfg, data=data, model=model, pool=pool,
                                  show_progress=FLAGS.progress)
          curve.check_epsilon(cell.target, result.epsilon)
          used_clip = (read_clip(run_cfg, model, data, pool, folder)
                       if math.isinf(cell.target) else clip[cell.algorithm])
          row = dict(method=result.display_name, algorithm=cell.algorithm, seed=seed,
                     target_epsilon=cell.target, epsilon=result.epsilon,
                     clip=used_clip, accuracy=100 * result.test.accuracy,
                     validation_accuracy=100 * result.history[-1].get(
                         'validation_accuracy', float('nan')),
                     train_seconds=result.train_seconds, **expected)
          files.write_json(os.path.join(folder, RECORD), row, indent=2, default=float)
        if math.isinf(cell.target):
          clip[cell.algorithm] = float(row['clip'])
        rows.append(row)
        print(f'{row["method"]} seed {seed} epsilon {curve.label(cell.target)}: '
              f'z {row["noise_multiplier"]:.3g}, clip {row["clip"]:.3g}, reported epsilon '
              f'{row["epsilon"]:.3g}, test accuracy {row["accuracy"]:.2f}%', flush=True)
  summary = curve.summarize(rows)
  table = curve.markdown(summary)
  settings = (f'{cfg.dataset}, model {cfg.model}, {cfg.rounds} rounds, {m} of {population} '
              f'training clients per round, delta {delta:g}, seeds {",".join(map(str, seeds))}')
  print(f'\nTest accuracy (%), {settings}\n\n{table}')
  tables.write_csv(rows, os.path.join(out, 'privacy_curve.csv'))
  tables.write_csv(summary, os.path.join(out, 'privacy_summary.csv'))
  files.write_text(os.path.join(out, 'privacy_curve.md'),
                   f'Test accuracy (%), {settings}\n\n{table}\n')
  curve.plot(summary, figure, title=settings)
  print(f'\nWrote {out}/privacy_curve.csv, privacy_summary.csv, privacy_curve.md and {figure}')


if __name__ == '__main__':
  errors.run(main, extra_errors=(curve.CurveError,))
