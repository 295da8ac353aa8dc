r"""Summarises runs scored again on other clients: per method, and paired against a reference.

  research/queues/other_writers.sh      # programs.evaluate --clients_from, one JSON per run
  python -m research.rescored --scores=runs/other_writers
  python -m research.rescored --scores=runs/other_writers --reference="FedAvg(Meta)"
  python -m research.rescored --scores=runs/supports/p90,runs/supports/p90_resampled

Reads every *.json that `programs.evaluate` wrote into --scores (one per run,
all on the same clients) and prints, per method: accuracy over all query
points (mean ± std over seeds), client mean, and the method minus
--reference per client, paired within a seed by client id and pooled over
seeds, with its 95% CI (research/rescored/scores.py). Several folders
(comma-separated) put variants of a cell side by side: a method found in more
than one folder gets a row per folder. --output also
writes the table to a Markdown file. Reads files only (no TensorFlow).
"""

from absl import flags

from research.rescored import scores as rescored
from tff_meta.core import cli, files

flags.DEFINE_string('scores', None, 'Folder of programs.evaluate JSON files (one per run), or '
                    'several folders, comma-separated, scored on the same clients; a method found '
                    'in more than one is reported per folder, "method [folder]".')
flags.DEFINE_string('reference', 'FedAvg', 'The method every other one is paired against (its '
                    'display name, e.g. FedAvg or "FedAvg(Meta)"); empty for none.')
flags.DEFINE_string('output', None, 'Also write the table to this Markdown file.')
FLAGS = flags.FLAGS


def main(argv):
  del argv
  if not FLAGS.scores:
    raise rescored.ScoresError('--scores is required: the folder programs.evaluate wrote its '
                               'JSON files into.')
  scores, clients = rescored.read(FLAGS.scores)
  reference = FLAGS.reference or None
  methods = {s.method for s in scores}
  if reference is not None and reference not in methods:
    raise rescored.ScoresError(f'--reference={reference}: no such method in {FLAGS.scores}; it '
                               f'has {", ".join(sorted(methods))}.')
  text = rescored.markdown(rescored.summarize(scores, reference), clients, reference)
  print(text)
  if FLAGS.output:
    files.write_text(FLAGS.output, text)


if __name__ == '__main__':
  cli.run(main, (rescored.ScoresError,))
