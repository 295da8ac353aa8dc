"""The keys every task's config has, declared once (`fields.declared` uses them with a task's
default): the run's name, seed, output folder, and checkpoint and evaluation periods."""

from __future__ import annotations

import dataclasses

from tff_meta.core.fields import at_least, field


@dataclasses.dataclass(frozen=True)
class RunKeys:
  name: str = field('experiment', 'Run name; the default output folder is runs/<name>.')
  seed: int = field(0, 'Seed of everything the run draws: the client, user or class split, the '
                    'support/query splits, sampling, episodes and initial weights.', at_least(0))
  output_dir: str = field('', 'Output folder (metrics, checkpoints, results); default '
                          'runs/<name>.')
  checkpoint_every: int = field(10, 'Save a checkpoint every N steps (rounds or episodes) and at '
                                'the end; a rerun resumes from the last one.', at_least(1))
  eval_every: int = field(10, 'Evaluate every N steps (rounds or episodes).', at_least(1))
