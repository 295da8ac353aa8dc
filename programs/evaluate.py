r"""Re-evaluates a finished programs.train run's saved state with other evaluation settings.

  python -m programs.evaluate --run_dir=runs/fedmeta/table2_femnist_p20_maml \
      --eval_inner_steps=0,1,5 --cache_dir=<tff data folder>

  python -m programs.evaluate --run_dir=runs/fedmeta/table2_femnist_p20_maml \
      --cache_dir=<tff data folder> --clients_from=leaf_femnist:<leaf femnist folder>

Rebuilds the run's data, clients, model and algorithm from its config.toml,
loads a checkpoint (--round, default the newest) and scores its global
parameters on the run's test (or validation) clients once per setting: every
combination of --eval_inner_steps, --eval_inner_lr and --finetune_epochs (none
given: the run's own evaluation, which repeats its eval.csv row). Nothing is
trained and the run's files are not changed; the table goes to stdout and to
<run_dir>/reevaluation.json and .md (or --output; --markdown=false writes the
.json alone, e.g. into a folder of scores for programs.report --scores). --clients_from scores the
clients of another dataset instead of the test clients (e.g. writers the run
never saw), each split by the run's support fraction and seed; --support_fraction
splits the scored clients at another fraction (FedAvg trained once gives every
support column). See
tff_meta/classification/reevaluation.py.
"""

import os

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402

from tff_meta.core.run_folder import CONFIG_FILE  # noqa: E402
from tff_meta.classification import reevaluation  # noqa: E402
from tff_meta.program import errors, executor, tasks  # noqa: E402
from tff_meta.core.config_file import ConfigError  # noqa: E402

flags.DEFINE_string('run_dir', None, 'The run folder (--output_dir of programs.train).')
flags.DEFINE_string('eval_inner_steps', None, 'Comma-separated inner steps at evaluation, e.g. '
                    '0,1,5 (0 = no adaptation); algorithms with eval_inner_steps.')
flags.DEFINE_string('eval_inner_lr', None, 'Comma-separated alpha (inner_lr) values for the '
                    'adaptation at evaluation; not Meta-SGD (it learned its rates).')
flags.DEFINE_string('finetune_epochs', None, 'Comma-separated FedAvg(Meta) fine-tuning epochs '
                    '(0 = none); a FedAvg run is then scored as FedAvg(Meta).')
flags.DEFINE_string('split', 'test', 'The clients to score: test or validation (known: the '
                    'training clients\' held-out sets, when the run keeps them).')
flags.DEFINE_string('clients_from', None, 'Score the clients of another dataset in place of the '
                    'test clients, as DATASET[:FOLDER], e.g. FEMNIST writers the run never saw: '
                    'leaf_femnist:<leaf femnist folder>. Each client is split into support '
                    'and query by the run\'s support fraction and seed.')
flags.DEFINE_float('support_fraction', None, 'Split the scored clients at this support fraction '
                   'instead of the run\'s, e.g. 0.5: a FedAvg or FedAvg(Meta) run at 20% then '
                   'gives the 50% cell (their training reads all of a client\'s data); a '
                   'meta-learner\'s rows are labelled as trained at another fraction.')
flags.DEFINE_integer('round', None, 'The checkpoint (round) to evaluate; default the newest.')
flags.DEFINE_string('cache_dir', None, 'Overrides the run\'s [data].cache_dir (TFF sqlite '
                    'folder).')
flags.DEFINE_string('output', None, 'Output path stem (.json and .md); default '
                    '<run_dir>/reevaluation.')
flags.DEFINE_boolean('markdown', True, 'Also write the table as <output>.md beside the scores '
                     '(.json). --markdown=false writes the .json alone, e.g. into a folder of '
                     'scores that programs.report --scores reads. The table is printed either way.')
executor.define_flags(flags)
FLAGS = flags.FLAGS


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise ConfigError('--run_dir is required: the folder of a finished programs.train run.')
  saved = os.path.join(FLAGS.run_dir, CONFIG_FILE)
  if os.path.isfile(saved):   # classification only (program/tasks.py)
    tasks.require('evaluate', tasks.task_of_file(saved))
  values = {flag: reevaluation.parse_values(flag, getattr(FLAGS, flag))
            for flag in reevaluation.KNOBS}
  settings = reevaluation.settings(values)
  clients_from = reevaluation.parse_clients_from(FLAGS.clients_from)
  support_fraction = reevaluation.parse_support_fraction(FLAGS.support_fraction)
  cfg = reevaluation.load_run_config(FLAGS.run_dir, FLAGS.cache_dir)
  for setting in settings:   # bad settings stop before the data load
    reevaluation.config_for(cfg, setting)
  paths = reevaluation.output_paths(FLAGS.run_dir, FLAGS.output, with_table=FLAGS.markdown)
  log_dir = os.path.dirname(os.path.abspath(paths[0]))
  with executor.make_pool(FLAGS, log_dir=log_dir) as pool:
    result = reevaluation.reevaluate(cfg, FLAGS.run_dir, pool, settings, split=FLAGS.split,
                                     round_num=FLAGS.round, clients_from=clients_from,
                                     support_fraction=support_fraction)
  reevaluation.write(result, paths)
  print(reevaluation.markdown(result))
  print('Written to ' + ' and '.join(path for path in paths if path))


if __name__ == '__main__':
  errors.run(main)
