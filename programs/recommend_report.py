r"""Recommendation runs across seeds: Chen et al. (2018b) Table 3 with error bars.

  python -m programs.recommend_report --runs=docs/runs/movielens_real --output_dir=/tmp/rec_report
  python -m programs.recommend_report --runs=runs/rec --output_dir=/tmp/r --reference=Bias\ baseline

Every folder under --runs (searched recursively) that holds the config.toml and
results.json of programs.recommend is a run. Runs are grouped by setting (task,
data, support fraction and sampling, scored users); a seed's methods may come
from several folders. Writes report.md and report.csv to --output_dir:

- per setting, each method's RMSE seed by seed, its mean ± std over seeds, the
  paired difference to --reference seed by seed (mean, 95% Student-t interval
  over seeds, and on how many seeds it is lower), and on how many seeds it has
  the setting's lowest RMSE;
- every metric's mean ± std over seeds (RMSE, Precision@1/3/10 with relevant =
  rating 5, Precision@1 with rating >= 4, NDCG@10);
- the run folders with the code version(s) that wrote them.

A seed found in more than one folder for one method is reported in a note
(with whether the RMSEs agree): the first folder's row is used.
Reads files only (no workers): a few seconds.
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2 (the config defaults import TF)

from absl import flags  # noqa: E402

from tff_meta.core import run_folder  # noqa: E402
from tff_meta.analysis import recommend_report  # noqa: E402
from tff_meta.core import cli  # noqa: E402

flags.DEFINE_list('runs', None, 'Comma-separated folders to search (recursively) for '
                  'programs.recommend run folders.')
flags.DEFINE_string('output_dir', None, 'Where to write report.md and report.csv.')
flags.DEFINE_string('reference', recommend_report.REFERENCE,
                    'The method every other is compared with, seed by seed, as its table '
                    'names it (Chen et al. 2018b Table 3\'s "Improvement": NN(pre-trained)).')
flags.mark_flags_as_required(['runs', 'output_dir'])
FLAGS = flags.FLAGS


def main(argv):
  del argv
  result = recommend_report.build(FLAGS.runs, FLAGS.output_dir, FLAGS.reference)
  cli.print_report(result, FLAGS.output_dir)


if __name__ == '__main__':
  cli.run(main, (run_folder.RunFolderError,))
