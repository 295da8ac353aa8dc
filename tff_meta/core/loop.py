"""The one checkpointed loop of every task: steps, releases, evaluation, selection, resume.

`run` drives `state, row = step(state, n)` for n = start + 1 .. total:

- restore: the newest checkpoint of `<folder>/checkpoints` (`managers.restore`,
  keeping `keep_total` of them; 0 keeps all) or the initial state; the run
  continues after it. `on_start(start)` runs once it has loaded, before any write;
- release: a step's row (if `step_file`) goes to that CSV (keyed by `unit`)
  and to `step_tensorboard` through tff.program's release managers; a release
  drops the rows at and past its key, so a resumed run writes no duplicates;
- evaluation (`Evaluation`): `evaluate(state, n)` on its schedule (and at 0
  on a fresh run) gives a row released to its own CSV and TensorBoard folder;
- selection (`select=(metric, 'min' | 'max')`, model selection or "early
  stopping"): the state of the best evaluated `metric` so far is kept. It is
  checkpointed with the current state as `{'state': ..., 'best': ...}`
  (atomically), and its step is found again from the evaluation CSV, so a
  resumed run keeps the best-so-far;
- divergence stop: `check(n, row)` sees every step row (see `stop_if_not_finite`);
- checkpoint: every `checkpoint_every` steps and at the end, between
  `before_save(n)` (e.g. a client-state store flushing its writes) and `after_save(n)`;
- a tqdm progress bar with `postfix(row, eval_row, n)`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Type

from tff_meta.core import checkpoints, managers
from tff_meta.core.run_folder import read_history

Row = Dict[str, float]


class Selected(NamedTuple):
  """The kept state and the step whose evaluation chose it (see module doc)."""
  state: object
  step: int


@dataclasses.dataclass
class Evaluation:
  """`evaluate(state, n) -> row`, when `evaluates(n)` (and at 0 on a fresh run if
  `at_start`), released to `<folder>/<csv_file>` and `<folder>/<tensorboard_dir>`."""
  evaluate: Callable[[Any, int], Row]
  evaluates: Callable[[int], bool]
  csv_file: str
  tensorboard_dir: str
  at_start: bool = True
  allow_blank: bool = True


@dataclasses.dataclass
class Result:
  state: Any
  start: int                  # the step the run resumed after (0 for a fresh run)
  evaluations: List[Row]      # the whole run's evaluation rows, `unit` first
  selected: Optional[Selected] = None


def better(value: float, best: float, mode: str) -> bool:
  """Strictly better (ties keep the earlier step)."""
  return value < best if mode == 'min' else value > best


def select_best(rows: List[Row], metric: str, mode: str, unit: str) -> int:
  """The step of the best `metric` in evaluation rows (the earliest of ties)."""
  best = rows[0]
  for row in rows[1:]:
    if better(row[metric], best[metric], mode):
      best = row
  return int(best[unit])


def stop_if_not_finite(error: Type[Exception], keys: Tuple[str, ...], what: str
                       ) -> Callable[[int, Row], None]:
  """A divergence check: raises `error` when one of `keys` of a step row is not finite."""
  def check(n: int, row: Row) -> None:
    bad = [k for k in keys if k in row and not math.isfinite(float(row[k]))]
    if bad:
      raise error(f'{what} diverged at step {n}: {", ".join(bad)} not finite.')
  return check


async def _call(hook, n: int) -> None:
  if hook is not None:
    done = hook(n)
    if asyncio.iscoroutine(done):
      await done


def _bar(total: int, start: int, name: str, show: bool):
  if not show:
    return None
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(total=total, initial=min(start, total), desc=name, file=sys.stderr,
              dynamic_ncols=True, mininterval=1.0 if sys.stderr.isatty() else 10.0)


async def run(*, name: str, folder: str, initial, step: Callable[[Any, int], Tuple[Any, Optional[Row]]],
              total: int, checkpoint_every: int, keep_total: int, unit: str,
              step_file: Optional[str] = None, step_tensorboard: Optional[str] = None,
              evaluation: Optional[Evaluation] = None, select: Optional[Tuple[str, str]] = None,
              check: Optional[Callable[[int, Row], None]] = None,
              before_save: Optional[Callable[[int], Any]] = None,
              after_save: Optional[Callable[[int], Any]] = None,
              on_start: Optional[Callable[[int], None]] = None,
              restore: Optional[Callable[[], Any]] = None,
              show_progress: bool = False,
              postfix: Optional[Callable[[Optional[Row], Optional[Row], int], dict]] = None
              ) -> Result:
  """Runs the loop (module doc). `restore()` (awaitable, optional) replaces the default
  restore and returns (state manager, state, start); `before_save` and `after_save`
  (e.g. pruning what the removed checkpoints implied) may be async."""
  os.makedirs(folder, exist_ok=True)
  if step_file:   # a damaged file stops the run before any write
    checkpoints.check_csv(os.path.join(folder, step_file), unit)
  if evaluation is not None:
    checkpoints.check_csv(os.path.join(folder, evaluation.csv_file), unit,
                          allow_blank=evaluation.allow_blank)
  saved = {'state': initial, 'best': initial} if select else initial
  if restore is not None:
    manager, saved, start = await restore()
  else:
    manager, saved, start = await managers.restore(folder, saved, name, unit=unit,
                                                   keep_total=keep_total)
  state, best = (saved['state'], saved['best']) if select else (saved, None)
  if start:
    print(f'Resuming {name} from {unit} {start} ({folder}).', file=sys.stderr, flush=True)
  if on_start is not None:
    on_start(start)
  step_release = (managers.metric_releases(folder, step_file, step_tensorboard, unit)
                  if step_file else None)
  evaluations: List[Row] = []
  eval_release = None
  if evaluation is not None:
    eval_path = os.path.join(folder, evaluation.csv_file)
    evaluations = [r for r in read_history(eval_path) if r[unit] <= start] if start else []
    eval_release = managers.metric_releases(folder, evaluation.csv_file,
                                            evaluation.tensorboard_dir, unit)

  async def evaluate(n: int) -> Row:
    nonlocal best
    row = evaluation.evaluate(state, n)
    evaluations.append({unit: float(n), **row})
    await eval_release.release(row, key=n)   # drops rows at and past `n`
    if select and select_best(evaluations, *select, unit) == n:
      best = state
    return row

  if evaluation is not None and start == 0 and evaluation.at_start:
    await evaluate(0)
  bar = _bar(total, start, name, show_progress)
  eval_row = None
  for n in range(start + 1, total + 1):
    state, row = step(state, n)
    if row is not None:
      if check is not None:
        check(n, row)
      if step_release is not None:
        await step_release.release(row, key=n)
    if evaluation is not None and evaluation.evaluates(n):
      eval_row = await evaluate(n)
    if n % checkpoint_every == 0 or n == total:
      await _call(before_save, n)
      await manager.save({'state': state, 'best': best} if select else state, n)
      await _call(after_save, n)
    if bar is not None:
      if postfix is not None:
        bar.set_postfix(postfix(row, eval_row, n), refresh=False)
      bar.update(1)
  if bar is not None:
    bar.close()
  selected = Selected(best, select_best(evaluations, *select, unit)) if select else None
  return Result(state, start, evaluations, selected)


def run_sync(**kwargs) -> Result:
  """`run` from synchronous code."""
  return asyncio.run(run(**kwargs))
