"""Few-round learning's `sweep` command: a grid of config values, chosen on validation classes.

Every combination of the --grid values (KEY=V1,V2,...; KEY any top-level
config key) runs the config's methods with `eval_part = "validation"`
(classes that neither meta-training nor the test uses), each in its own
folder; sweep.md and sweep.json tabulate validation accuracy per method.
"""

import dataclasses
import itertools
import os


from absl import flags

from tff_meta.core.tables import markdown_table
from tff_meta.core.config_file import ConfigError
from tff_meta.fewround import config as config_lib
from tff_meta.fewround import experiment
from tff_meta.program import errors, executor
from tff_meta.program.commands import fewround_train
from tff_meta.core import files

def define_flags() -> None:
  """Defines this command's flags (absl's global FLAGS)."""
  config_lib.define_flags(flags)
  executor.define_flags(flags, progress=True)
  flags.DEFINE_multi_string('grid', [], 'KEY=V1,V2,... : values of one config key to try '
                            '(repeat the flag for more keys; all combinations run).')


FLAGS = flags.FLAGS


def parse_grid(items):
  """['inner_lr=0.01,0.1', ...] -> [('inner_lr', ['0.01', '0.1']), ...], checked."""
  fields = {f.name: f for f in dataclasses.fields(config_lib.FewRoundConfig)}
  grid = []
  for item in items:
    key, sep, values = item.partition('=')
    key = key.strip()
    if not sep or not values.strip():
      raise ConfigError(f'--grid {item!r}: write KEY=V1,V2,... (e.g. inner_lr=0.01,0.1).')
    if key not in fields or key in ('data', 'model_options', 'methods', 'output_dir',
                                    'eval_part'):
      raise ConfigError(f'--grid key {key!r} is not a sweepable config key.')
    grid.append((key, [v.strip() for v in values.split(',') if v.strip()]))
  if not grid:
    raise ConfigError('Give at least one --grid KEY=V1,V2,...')
  return grid


def _typed(key, text):
  """`text` as config key `key`'s type, read as a flag value would be."""
  return getattr(config_lib.load(None, {key: text}), key)


def combinations(cfg, grid):
  """(label, config) per combination, validation classes, own output folder."""
  root = cfg.resolved_output_dir()
  for values in itertools.product(*[v for _, v in grid]):
    changes = {k: _typed(k, v) for (k, _), v in zip(grid, values)}
    label = ','.join(f'{k}={v}' for (k, _), v in zip(grid, values))
    folder = os.path.join(root, label.replace('=', '_').replace(',', '__'))
    yield label, dataclasses.replace(
        cfg, eval_part='validation', output_dir=folder, **changes).validate()


def table(cfg, results):
  """Markdown: a row per combination, a column per method; best per method in bold."""
  last = str(max(cfg.test_rounds))
  best = {m: max(results, key=lambda row: row['methods'][m]['mean'])['label']
          for m in cfg.methods}
  rows = [[row['label'], *(f"**{row['methods'][m]['text']}**" if best[m] == row['label']
                            else row['methods'][m]['text'] for m in cfg.methods)]
          for row in results]
  return (markdown_table(['setting', *cfg.methods], rows)
          + f'\n\nValidation-class accuracy after R = {last} test rounds.\n')


def main(argv):
  del argv
  try:
    grid = parse_grid(FLAGS.grid)
    cfg = fewround_train.load_config()
    if not FLAGS.output_dir:
      cfg = dataclasses.replace(cfg, output_dir=os.path.join(
          'runs', cfg.name + '_sweep'))
    settings = list(combinations(cfg, grid))
    root = cfg.resolved_output_dir()
    files.require_folder(root)
    data = experiment.load_data(cfg)
    for _, setting in settings:   # e.g. a grid of n_way the class split cannot give
      experiment.check_request(setting, data)
    for _, setting in settings:   # e.g. a grid of n_way the class split cannot give
      experiment.check_request(setting, data)
    os.makedirs(root, exist_ok=True)
    results = []
    last = str(max(cfg.test_rounds))
    with executor.make_pool(FLAGS, log_dir=root) as pool:
      for i, (label, setting) in enumerate(settings):
        print(f'[{i + 1}/{len(settings)}] {label}', flush=True)
        experiment.prepare_output(setting, setting.resolved_output_dir())
        rows = experiment.run(setting, data, pool, FLAGS.progress, setting.resolved_output_dir())
        results.append({'label': label, 'methods': {
            r['method']: r['accuracy'][last] for r in rows}})
        text = table(cfg, results)
        files.write_text(os.path.join(root, 'sweep.md'), text)
        files.write_json(os.path.join(root, 'sweep.json'), {'grid': grid, 'results': results},
                         indent=1)
  except ValueError as e:   # e.g. a grid value out of range; user errors end in errors.run
    errors.fail(e)
  print(text)
  print(f'Outputs in {root}')
