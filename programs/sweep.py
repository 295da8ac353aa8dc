r"""A grid of config values for any task, selected on validation data (never on test).

  python -m programs.sweep --config=configs/demo/digits.toml --algorithm=fedmeta_maml \
      --grid=inner_lr=0.05,0.1,0.3 --grid=server_lr=0.001,0.003,0.01 --seeds=0,1,2
  python -m programs.sweep --config=configs/fewround/femnist62_5way_iid.toml \
      --methods=fedavg --grid=inner_lr=0.003,0.01,0.03 --grid=local_steps=1,5

The config's keys say its task (`tff_meta/program/tasks.py`). Classification
runs every combination through the training loop of `programs.train` and
selects by mean validation-client accuracy over --seeds; few-round learning
scores every combination on validation classes. Each combination runs in its
own folder under --output_dir; the test column, where printed, is for the
record and never selects.
"""

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from tff_meta.program import tasks  # noqa: E402

PROGRAM = 'sweep'   # its flags are those of the config's task's command

if __name__ == '__main__':
  tasks.run_program(PROGRAM)
