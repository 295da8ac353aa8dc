r"""Few-round learning (Park et al.): meta-train, then test R rounds of FL on unseen classes.

  python -m programs.few_round --config=configs/fewround/femnist62_5way_iid.toml
  python -m programs.few_round --config=configs/fewround/cifar100_5way_iid.toml --data_path=/data/cifar-100-python
  python -m programs.few_round --config=configs/fewround/femnist62_5way_iid.toml --methods=frl_distance_gpal,fedavg --test_rounds=1,2,3

For every method in --methods (fewround.baselines.METHODS) it runs the
preparing stage (FRL meta-training, or the baselines' pre-training under the
same communication budget), then deploys: R rounds of FL on test episodes of
unseen classes, accuracy mean ± 95% CI over --test_episodes episodes, per
--test_rounds value. Every method sees the same seeded episodes. Outputs in
--output_dir (default runs/<name>): results.json, results.md, config.toml.
Rounds run on a TFF worker pool (--executor/--workers/--local_workers).
"""

import json
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app, flags  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from tff_meta.fewround import baselines, deploy, process  # noqa: E402
from tff_meta.fewround import config as config_lib  # noqa: E402
from tff_meta.fewround import tasks  # noqa: E402
from tff_meta.program import executor, logs  # noqa: E402
from tff_meta.program import errors  # noqa: E402
from tff_meta.program.errors import USER_ERRORS  # noqa: E402

config_lib.define_flags(flags)
flags.DEFINE_bool('progress', True, 'Show progress bars.')
executor.define_flags(flags)
FLAGS = flags.FLAGS


def _table(cfg, rows) -> str:
  header = '| method | ' + ' | '.join(f'R = {r}' for r in cfg.test_rounds) + \
      ' | preparing rounds | seconds |'
  lines = [header, '|' + '---|' * (len(cfg.test_rounds) + 3)]
  for row in rows:
    cells = ' | '.join(row['accuracy'][str(r)]['text'] for r in cfg.test_rounds)
    lines.append(f"| {row['method']} | {cells} | {row['info'].get('communication_rounds', 0)} "
                 f"| {row['seconds']:.0f} |")
  return '\n'.join(lines)


def _toml(cfg) -> str:
  out = []
  for key, value in cfg.__dict__.items():
    if isinstance(value, dict):
      continue
    out.append(f'{key} = {json.dumps(list(value) if isinstance(value, tuple) else value)}')
  for table in ('data', 'model_options'):
    out.append(f'\n[{table}]')
    out += [f'{k} = {json.dumps(v)}' for k, v in getattr(cfg, table).items()]
  return '\n'.join(out) + '\n'


def load_data(cfg):
  data = tasks.load_class_split(cfg.dataset, cfg.class_split, cfg.seed, **cfg.data)
  print(f'{data.description}; classes per part: '
        f'{ {k: len(v) for k, v in data.classes.items()} }', flush=True)
  return data


def _write(cfg, out, rows) -> str:
  table = _table(cfg, rows)
  with open(os.path.join(out, 'results.json'), 'w') as f:
    json.dump({'config': _toml(cfg), 'results': rows}, f, indent=1)
  with open(os.path.join(out, 'results.md'), 'w') as f:
    f.write(table + '\n')
  return table


def run(cfg, data, pool, progress: bool, out: str):
  """Prepares and tests every method (results written after each); returns the rows."""
  ctx = baselines.Context(cfg, data, progress)
  rows = []
  with tff.framework.get_context_stack().install(pool.context):
    for name in cfg.methods:
      start = time.time()
      with pool.watch(f'method {name}'):
        prepared = baselines.METHODS.get(name)(ctx)
        computations = process.build_round(prepared.model, prepared.hparams, ctx.spec)
        summaries = deploy.test_episodes(
            computations, prepared.weights,
            lambda i: ctx.episode(cfg.eval_part, baselines.TEST_STREAM, i), cfg.test_episodes,
            cfg.test_rounds, progress, desc=f'test {name}')
      row = {'method': name, 'seconds': time.time() - start, 'info': prepared.info,
             'accuracy': {str(r): {'mean': s.mean, 'ci95': s.ci95, 'episodes': s.episodes,
                                   'text': str(s)} for r, s in summaries.items()}}
      print(f"{name}: " + ', '.join(f'R={r} {s}' for r, s in summaries.items()), flush=True)
      rows.append(row)
      _write(cfg, out, rows)
  return rows


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logs.quiet()
  try:
    cfg = config_lib.load(FLAGS.config, config_lib.overrides_from_flags(FLAGS))
    for method in cfg.methods:
      baselines.METHODS.get(method)
    cfg = config_lib.with_data_path(cfg, FLAGS.data_path, tasks.path_option(cfg.dataset))
    cfg.validate()
    out = cfg.resolved_output_dir()
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'config.toml'), 'w') as f:
      f.write(_toml(cfg))
    data = load_data(cfg)
    with executor.make_pool(FLAGS, log_dir=out) as pool:
      rows = run(cfg, data, pool, FLAGS.progress, out)
  except (*USER_ERRORS, ValueError) as e:
    errors.fail(e)
  print(_write(cfg, out, rows))
  print(f'\nOutputs in {out}')


if __name__ == '__main__':
  app.run(main)
