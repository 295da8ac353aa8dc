"""Whether every tensor of a structure is finite: the one non-finite check.

Client updates (`algorithms/process.py`), few-round meta-updates
(`fewround/meta_update.py`, `fewround/process.py`) and one-shot scores
(`fewround/oneshot.py`) reject or rank by it.
"""

import tensorflow as tf


def all_finite(structure) -> tf.Tensor:
  """A scalar bool tensor: no NaN or Inf in any tensor of `structure`."""
  return tf.reduce_all(tf.stack(
      [tf.reduce_all(tf.math.is_finite(t)) for t in tf.nest.flatten(structure)]))
