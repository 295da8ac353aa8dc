r"""Trains any task from its config: classification, few-round learning or recommendation.

  python -m programs.train --config=configs/demo/digits.toml --algorithm=fedmeta_maml
  python -m programs.train --config=configs/fedmeta/table2_femnist_p20_maml.toml --cache_dir=<tff data folder>
  python -m programs.train --config=configs/fewround/femnist62_5way_iid.toml --data_path=<tff data folder>
  python -m programs.train --config=configs/recommend/movielens_p80.toml --data_path=<ml-100k folder>

The config's keys say its task (`tff_meta/program/tasks.py`); the task's
command defines the flags: every config field has an override flag (see
--helpfull with a --config). Outputs go to --output_dir (default
runs/<name>): config.toml, results.json, metrics, TensorBoard logs and
checkpoints. Re-running the same command after a kill resumes from the last
checkpoint.
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from tff_meta.program import tasks  # noqa: E402

PROGRAM = 'train'   # its flags are those of the config's task's command

if __name__ == '__main__':
  tasks.run_program(PROGRAM)
