r"""How discriminative a meta-trained phi's embedding is, checkpoint by checkpoint (issue #14).

  python -m research.fewround_embedding --run_dir=runs/fewround_long/frl/seed1 \
      --method=frl_distance --data_path=<tff data folder>

A diagnostic for FRL's degrading meta-training (docs/RESULTS.md of 3ab6296, §9a). For each
kept checkpoint of `<run_dir>/<method>/checkpoints/` it embeds the support
sets of `--episodes` seeded episodes with phi itself and prints
`research.fewround_diagnostics.embedding_stats` (the mean embedding norm, the
squared distances between prototypes and to one's own prototype, their
ratio, the learned temperature of `scaled_distance`, Eq. 2's loss at phi), averaged over
the episodes' clients. With group
normalisation after every conv (the configs' `norm = "group"`) the
embedding's overall scale is pinned by the last block's gamma and beta; their
mean |gamma| and mean beta are printed too.

Episodes come from the run's own config and seed: `--part=train` the
meta-train classes (stream 0, the first meta-training episodes), or
`--part=validation` (the selection stream). The run folder is not changed.
"""

import os

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402
import tensorflow_federated as tff  # noqa: E402,F401  pylint: disable=unused-import

from tff_meta.program import errors  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string('run_dir', None, 'A few-round run folder (holds config.toml).')
flags.DEFINE_string('method', 'frl_distance', 'The meta-trained method\'s stage folder.')
flags.DEFINE_string('data_path', None, 'The data folder (as programs.train).')
flags.DEFINE_integer('episodes', 10, 'Seeded episodes averaged per checkpoint.')
flags.DEFINE_enum('part', 'train', ['train', 'validation'], 'Classes the episodes draw.')


def main(argv):
  del argv
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround import baselines, experiment, selection, tasks  # pylint: disable=g-import-not-at-top
  from research import fewround_diagnostics as diagnostics
  from tff_meta.fewround import config as config_lib  # pylint: disable=g-import-not-at-top
  if FLAGS.method not in baselines.FRL_METHODS:
    errors.fail(config_lib.ConfigError(f'--method={FLAGS.method} is not a meta-trained FRL '
                                       f'method; use one of {", ".join(baselines.FRL_METHODS)}'))
  if not FLAGS.run_dir:
    errors.fail(config_lib.ConfigError('--run_dir is required: a programs.train output '
                                       'folder, e.g. runs/fewround_long/frl/seed1'))
  root = os.path.join(FLAGS.run_dir, FLAGS.method, 'checkpoints')
  if not os.path.isdir(root):
    errors.fail(config_lib.ConfigError(f'no checkpoints at {root}: is --method a meta-trained '
                                       'method of that run?'))
  cfg = config_lib.load(os.path.join(FLAGS.run_dir, 'config.toml'))
  cfg = config_lib.with_data_path(cfg, FLAGS.data_path, tasks.path_option(cfg.dataset))
  ctx = baselines.Context(cfg, experiment.load_data(cfg))
  head, _ = baselines.FRL_METHODS[FLAGS.method]
  model = ctx.model(head(cfg)[0])
  stream = baselines.TRAIN_STREAM if FLAGS.part == 'train' else selection.VALIDATION_STREAM
  clients = [c for i in range(FLAGS.episodes) for c in ctx.episode(FLAGS.part, stream, i)]
  versions = sorted(int(n.rsplit('_', 1)[1]) for n in os.listdir(root)
                    if n.startswith('program_state_'))
  print(f'{FLAGS.run_dir}/{FLAGS.method}: {FLAGS.episodes} {FLAGS.part}-class episodes '
        f'({len(clients)} clients), embeddings at phi')
  print('| episode | |f| | between | within | ratio | tau | loss at phi | last block: mean '
        '|gamma| / mean beta |\n|---|---|---|---|---|---|---|---|')
  embed = diagnostics.graph_embed(model)
  for v in versions:
    phi = diagnostics.read_phi(os.path.join(root, f'program_state_{v}'),
                               len(model.initial_weights))
    s = diagnostics.embedding_stats(model, phi, clients, embed)
    gamma, beta = phi[model.num_backbone - 2], phi[model.num_backbone - 1]
    print(f"| {v} | {s['|f|']:.3f} | {s['between']:.3f} | {s['within']:.3f} | {s['ratio']:.3f} "
          f"| {s['tau']:.3f} | {s['loss']:.3f} | {np.abs(gamma).mean():.3f} / "
          f"{beta.mean():+.3f} |", flush=True)


if __name__ == '__main__':
  errors.run(main)   # bad input: one `error:` line, no traceback
