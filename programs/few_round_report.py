r"""Few-round runs across seeds: Park et al. Tables 1 and 3 with error bars, and their curves.

  python -m programs.few_round_report --runs=runs/fewround_long --output_dir=runs/fewround_long/report
  python -m programs.few_round_report --runs=docs/runs/fewround_long --output_dir=/tmp/frl_report \
      --reference=finetune_fedavg

Every folder under --runs (searched recursively) whose results.json was written
by programs.few_round is a run; a seed folder may hold several methods. Runs
are grouped by setting (dataset, N-way, K, IID or not, examples per class,
meta-trained R, scored classes) and method; the runs of a group are its seeds,
and configs that differ in more than the seed are kept apart as variants.
Writes to --output_dir:

- report.md / report.csv: accuracy after each tested R as mean ± std over
  seeds (with the mean per-seed 95% CI over test episodes), the gain from the
  smallest to the largest R, and the paired difference to --reference on the
  same seeded test episodes (per seed, with its 95% CI);
- accuracy_by_rounds.png: accuracy against R, mean ± std over seeds;
- meta_training.png: meta-train query accuracy per episode (a 50-episode
  rolling mean, averaged over seeds), for the meta-trained methods.

Reads files only (no workers): a few seconds. It imports TensorFlow, for the
few-round config's defaults (`fewround.config.toml_defaults`, which fill the
keys an older config.toml lacks).
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import flags  # noqa: E402

from tff_meta.core import run_folder  # noqa: E402
from tff_meta.analysis import fewround_report  # noqa: E402
from tff_meta.core import cli  # noqa: E402

flags.DEFINE_list('runs', None, 'Comma-separated folders to search (recursively) for '
                  'programs.few_round run folders.')
flags.DEFINE_string('output_dir', None, 'Where to write report.md, report.csv and the plots.')
flags.DEFINE_string('reference', fewround_report.REFERENCE,
                    'The method every other is compared with, episode by episode '
                    '(Park et al. Table 1: fine-tuning via FedAvg).')
flags.mark_flags_as_required(['runs', 'output_dir'])
FLAGS = flags.FLAGS


def main(argv):
  del argv
  result = fewround_report.build(FLAGS.runs, FLAGS.output_dir, FLAGS.reference)
  cli.print_report(result, FLAGS.output_dir)


if __name__ == '__main__':
  cli.run(main, (run_folder.RunFolderError,))
