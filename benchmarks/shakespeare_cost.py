r"""Cost model of a Shakespeare round: seconds against roles a round and snippets a role.

  python -m benchmarks.shakespeare_cost --cache_dir=<tff data folder> \
      --configs=configs/fedmeta/table2_shakespeare_p20_maml.toml,configs/fedmeta/table2_shakespeare_p20_fedavg.toml \
      --points=4x64,4x128,4x256,8x128,16x128 --rounds=3

For each config (FedMeta's Shakespeare cells, Appendix A.2: 50 roles a
round, 400 rounds) and each --points entry `RxS` (R roles a round, at most S
snippets, i.e. 80-character windows, of each role a round: the config's
`clients_per_round` and `max_client_examples`), runs `benchmarks.config_cost`'s
measurement (one local worker, --rounds training rounds of the clients and
data the training loop samples; the first builds the graphs) and keeps the
median of the later rounds. It fits, per config, seconds a round =
a + b x roles + c x (snippets in the round), least squares over the points
(the round's snippets counted, not R x S: a role may hold fewer than S), and
prints the points, the fit and its largest residual, and projections of the
training rounds (evaluations are timed by `benchmarks.config_cost`): the
config as given (its own clients_per_round and cap) and the paper's cell (50
roles, every snippet of each role, --paper_rounds rounds) with this file's
mean training role and with the paper's (Table 1). `--refit=<kept output>`
fits a kept output's points again without running a round (the points of
the kept output's n-th config project the n-th of --configs). Not a test:
nothing is asserted.
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

import os  # noqa: E402

from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import common, config_cost  # noqa: E402  (its --configs, --rounds, --cache_dir)
from tff_meta.classification import config as config_lib  # noqa: E402
from tff_meta.classification import experiment  # noqa: E402
from tff_meta.core import logs  # noqa: E402
from tff_meta.data import client_data  # noqa: E402

flags.DEFINE_list('points', ['4x64', '4x128', '4x256', '8x128', '16x128'],
                  'RxS: R roles a round, at most S snippets of each role a round.')
flags.DEFINE_integer('paper_roles', 50, 'Roles a round of the paper\'s cell (Appendix A.2).')
flags.DEFINE_integer('paper_rounds', 400, 'Rounds of the paper\'s cell (Table 2 caption).')
flags.DEFINE_float('paper_snippets', 625127 / 1129, 'Snippets of the paper\'s mean role '
                   '(Table 1: 625,127 samples over 1,129 roles).')
flags.DEFINE_string('refit', None, 'A kept output of this benchmark: fit and project its '
                    'points again (with this code\'s model), running no round.')
FLAGS = flags.FLAGS


def fit(points):
  """(a, b, c, largest |residual|): seconds = a + b x roles + c x snippets, least squares over
  (roles, snippets, seconds) points; a fixed cost, a cost per role (the LSTM's 80 steps run
  op by op whatever a role's batch), a cost per snippet."""
  r, x, t = (np.array([p[i] for p in points], float) for i in range(3))
  design = np.stack([np.ones_like(x), r, x], axis=1)
  (a, b, c), *_ = np.linalg.lstsq(design, t, rcond=None)   # a, b, c: float
  return a, b, c, float(np.max(np.abs(design @ np.array([a, b, c]) - t)))


def read_points(path):
  """{config: [(roles, snippets, wall s, CPU s)]} from a kept output's table rows."""
  out = {}
  for line in open(path):
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) == 5 and cells[1].isdigit():
      wall, cpu = cells[4].replace('(', ' ').replace(')', ' ').split()
      out.setdefault(cells[0], []).append((int(cells[1]), int(cells[3]), float(wall), float(cpu)))
  return out


def project(name, points, sizes, base):
  """Prints the fits (wall and CPU seconds) and their projections: the config as given and
  the paper's cell. CPU seconds are a cell's time when it has a core of its own (two cells
  at once on 2 cores); wall seconds are under the load the points were measured at."""
  mean = np.mean(sizes)
  own_snippets = base.clients_per_round * np.mean([min(n, base.max_client_examples or n)
                                                   for n in sizes])
  for kind, column in (('wall', 2), ('CPU', 3)):
    a, b, c, worst = fit([(p[0], p[1], p[column]) for p in points])
    at = lambda roles, snippets: a + b * roles + c * snippets   # pylint: disable=cell-var-from-loop
    own = at(base.clients_per_round, own_snippets)
    print(f'{name}: {kind} seconds a round = {a:.2f} + {b:.3f} x roles + {c * 1000:.3f} ms x '
          f'snippets (largest residual {worst:.2f} s over {len(points)} points); config as '
          f'given ({base.clients_per_round} roles, cap {base.max_client_examples or "none"}): '
          f'{own:.1f} s a round, {own * base.rounds / 3600:.2f} h for its {base.rounds} rounds.')
    for label, per_role in ((f'this file\'s mean training role of {len(sizes)}', mean),
                            ('the paper\'s Table 1 mean', FLAGS.paper_snippets)):
      paper = at(FLAGS.paper_roles, FLAGS.paper_roles * per_role)
      print(f'{name}: {kind}, paper\'s cell ({FLAGS.paper_roles} roles x {per_role:.0f} '
            f'snippets, {label}; {FLAGS.paper_rounds} rounds): {paper:.0f} s a round, '
            f'{paper * FLAGS.paper_rounds / 3600:.0f} h of training.', flush=True)


def main(argv):
  del argv
  logs.quiet()
  kept = read_points(FLAGS.refit) if FLAGS.refit else None
  if not kept:
    print(f'{common.machine()}; {FLAGS.rounds} training rounds a point (median of the later ones)')
  for index, path in enumerate(FLAGS.configs):
    base = config_lib.load(path, {'cache_dir': FLAGS.cache_dir}).validate()
    data = experiment.prepare_data(base)
    sizes = [sum(c.sizes()[:2]) for c in data.train]   # a training role's snippets, all of them
    name = os.path.basename(path)
    if kept:   # a config's own points, or those of the kept output's config at its place
      measured = name if name in kept else list(kept)[index]
      print(f'{name}: the points of {measured}')
      project(name, kept[measured], sizes, base)
      continue
    alg = experiment.build_algorithm(base, experiment.build_model(base, data), data)
    common.table(['config', 'roles', 'cap', 'snippets a round', 'round s (CPU s)'])
    points = []
    for point in FLAGS.points:
      roles, cap = (int(v) for v in point.split('x'))
      cfg = config_lib.load(path, {'cache_dir': FLAGS.cache_dir, 'clients_per_round': roles,
                                   'max_client_examples': cap}).validate()
      cells = config_cost.measure(cfg, data, alg, cfg.max_concurrent_calls)
      snippets = int(np.mean([   # the timed rounds' (2, 3, ...) snippets, as the loop draws
          sum(min(sizes[i], cap) for i in client_data.sample_clients(len(sizes), roles, cfg.seed, r))
          for r in range(2, FLAGS.rounds + 1)]))
      points.append((roles, snippets, cells['later'], cells['later_cpu']))
      print(f'| {name} | {roles} | {cap} | {snippets} | {cells["later"]:.1f} '
            f'({cells["later_cpu"]:.1f}) |', flush=True)
    project(name, points, sizes, base)

if __name__ == '__main__':
  app.run(main)
