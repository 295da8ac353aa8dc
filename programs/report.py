r"""Turns finished run folders of any task into a report: tables and plots.

  python -m programs.report --runs=out/demo --output_dir=out/demo/report
  python -m programs.report --runs=runs/femnist_short,runs/shakespeare --output_dir=out/report \
      --target_accuracy=emnist=0.74,shakespeare=0.38
  python -m programs.report --runs=docs/runs/fedmeta --output_dir=out/r --reference=fedavg_meta

Every folder under --runs (searched recursively) that holds results.json and
config.toml is a run; each task reads its own (`tff_meta/program/tasks.py`):
few-round runs get Park et al. Tables 1 and 3 with error bars
(`analysis/fewround_report.py`), recommendation runs Chen et al. (2018b)
Table 3 with error bars (`analysis/recommend_report.py`), and classification
runs what follows. With runs of several tasks, each task's report goes to
--output_dir/<task>. Classification runs: what programs.train, compare, sweep and reproduce write.
Runs are grouped by method and setting (dataset, model, support fraction); the
runs of a group are its seeds. Writes to --output_dir:

- report.md: accuracy (mean ± std over seeds) as methods × settings, and per
  setting: client mean, mean of the worst 10% of clients, the difference to
  FedAvg on the same test clients (paired within a seed, pooled over seeds,
  with its 95% CI), and the rounds, MB and GFLOPs to the first evaluation
  reaching the target accuracy, with FedAvg's MB and GFLOPs divided by the
  method's (FedMeta Fig. 3's ratio); for runs of the paper's datasets, models
  and support fractions, ours beside FedMeta Table 2 in its layout;
- report.csv: the same numbers;
- convergence_rounds.png, convergence_bytes.png: test accuracy against rounds
  and against cumulative MB sent, mean over seeds;
- fairness.png, fairness.md: kernel density and percentiles of the final
  per-client accuracy (FedMeta Fig. 2, bottom row);
- cost.png: MB and GFLOPs to the target per method (FedMeta Fig. 3), when some
  method reaches it.

Without --target_accuracy, FEMNIST/Shakespeare/Sent140 use the paper's 74% /
38% / 70% and other datasets get no cost columns. Reads files only, no
workers: a few seconds. It imports TensorFlow, for the configs' defaults
(`program.config`, which fill the keys an older config.toml lacks).
"""

import os
import sys

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF's start-up noise dropped; the configs' defaults need it

from absl import flags  # noqa: E402

from tff_meta.core import cli  # noqa: E402
from tff_meta.core import run_folder  # noqa: E402
from tff_meta.program import tasks  # noqa: E402

flags.DEFINE_list('runs', None, 'Comma-separated folders to search (recursively) for run folders.')
flags.DEFINE_string('output_dir', None, 'Where to write report.md, the CSV and the plots.')
flags.DEFINE_string('target_accuracy', '',
                    'Classification: target test accuracy as a fraction for the cost-to-target '
                    'columns and cost.png: "0.74" for every dataset, or '
                    '"emnist=0.74,shakespeare=0.38" (a bare value is the default for the others). '
                    'Empty: FedMeta Fig. 3\'s targets for FEMNIST, Shakespeare and Sent140.')
flags.DEFINE_string('reference', None,
                    'The method every other is paired against; default per task: FedAvg '
                    '(classification, FedMeta\'s baseline), fine-tuning via FedAvg (few-round, Park '
                    'et al. Table 1), NN(pre-trained) (recommendation, Chen et al. 2018b Table 3).')
flags.DEFINE_string('scores', None,
                    'Instead of --runs: a folder of programs.evaluate score files (one JSON per '
                    'run, all on the same clients), or several, comma-separated; prints each '
                    'method\'s accuracy and its paired difference to --reference (default FedAvg) '
                    'per client, and writes rescored.md to --output_dir when given.')
FLAGS = flags.FLAGS


def _scores():
  """--scores: runs scored again on other clients (`analysis/rescored.py`)."""
  from tff_meta.analysis import rescored  # pylint: disable=g-import-not-at-top
  from tff_meta.core import files  # pylint: disable=g-import-not-at-top
  scores, clients = rescored.read(FLAGS.scores)
  reference = 'FedAvg' if FLAGS.reference is None else (FLAGS.reference or None)
  methods = {s.method for s in scores}
  if reference is not None and reference not in methods:
    raise rescored.ScoresError(f'--reference={reference}: no such method in {FLAGS.scores}; it '
                               f'has {", ".join(sorted(methods))}.')
  text = rescored.markdown(rescored.summarize(scores, reference), clients, reference)
  print(text)
  if FLAGS.output_dir:
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    files.write_text(os.path.join(FLAGS.output_dir, 'rescored.md'), text)


def _classification(folders, output_dir):
  from tff_meta.analysis import report  # pylint: disable=g-import-not-at-top
  result = report.build_report(folders, output_dir, FLAGS.target_accuracy, FLAGS.reference)
  for n in result['notes']:
    print(f'note: {n}', file=sys.stderr)
  print(result['markdown'].split('\n## Figures')[0].rstrip())
  names = ', '.join(os.path.basename(f) for f in result['files'])
  print(f'\nWrote to {output_dir}: {names}')


def main(argv):
  del argv
  if FLAGS.scores:
    _scores()
    return
  if not FLAGS.runs or not FLAGS.output_dir:
    raise run_folder.RunFolderError('give --runs=DIR[,DIR...] and --output_dir=OUT (or '
                                    '--scores=DIR for runs scored on other clients)')
  found, unfinished = tasks.report_runs(FLAGS.runs)
  for u in unfinished:
    print(f'note: left out unfinished run folder (no {run_folder.RESULTS_FILE}): {u}',
          file=sys.stderr)
  if not found:
    raise run_folder.RunFolderError(
        f'no run folders (a folder holding {run_folder.RESULTS_FILE} and '
        f'{run_folder.CONFIG_FILE}) under {", ".join(FLAGS.runs)}; give the folders a training '
        'program wrote')
  for name, folders in found.items():
    out = FLAGS.output_dir if len(found) == 1 else os.path.join(FLAGS.output_dir, name)
    if len(found) > 1:
      print(f'\n# {name} ({len(folders)} run folders)\n')
    task = tasks.get(name)
    if task is tasks.CLASSIFICATION:   # its report takes --target_accuracy too
      _classification(folders if len(found) > 1 else FLAGS.runs, out)
      continue
    module = task.report
    cli.print_report(module.build(folders, out, FLAGS.reference or module.REFERENCE), out)


if __name__ == '__main__':
  from tff_meta.analysis.rescored import ScoresError  # noqa: E402
  cli.run(main, (run_folder.RunFolderError, ScoresError))
