"""The training loop as tff.program logic.

- runs the process on a `WorkerPool`: one project-owned local C++ worker by
  default, or several local/remote workers through TFF's mergeable context.
  (`tff.program.NativeFederatedContext` in TFF 0.87 only accepts
  CLIENTS-placed values that come from a `FederatedDataSource` of sequences;
  our client data are structs of tensors, so the loop calls the pool's
  context directly and keeps tff.program's state and release managers);
- names a worker that stops answering (`WorkerUnavailableError`);
- checkpoints the server state with `FileProgramStateManager`; a killed run
  restarts at the round after its last checkpoint, and the metric files drop
  rows past that round before continuing (no duplicates);
- releases per-round training metrics to CSV and TensorBoard
  (`GroupingReleaseManager`), and evaluation metrics to their own CSV;
- shows a progress bar with the round, loss and accuracy;
- rejects non-finite client updates (the process keeps the state) and stops
  with a clear error if training diverges.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
import sys
import time
from typing import Dict, List, Optional

import numpy as np
import tensorflow_federated as tff
from absl import logging

from tff_meta.algorithms import Algorithm
from tff_meta.data.protocol import ProtocolData
from tff_meta.evaluation import communication, personalized
from tff_meta.program import client_data
from tff_meta.runtime.pool import WorkerPool

DIVERGENCE_PATIENCE = 5


class TrainingDivergedError(RuntimeError):
  pass


class IncompatibleCheckpointError(RuntimeError):
  pass


@dataclasses.dataclass
class RunResult:
  algorithm: str
  display_name: str
  rounds: int
  test: personalized.EvalSummary
  history: List[Dict[str, float]]
  bytes_down: int
  bytes_up: int
  train_seconds: float
  output_dir: str
  client_flops: float = float('nan')   # all clients, all rounds (metrics.csv)

  def row(self) -> Dict[str, float]:
    return collections.OrderedDict(
        method=self.display_name, accuracy=100 * self.test.accuracy,
        client_mean=100 * self.test.client_mean, client_std=100 * self.test.client_std,
        test_clients=len(self.test.client_accuracies), query_examples=self.test.num_examples,
        rounds=self.rounds, mb_sent=(self.bytes_down + self.bytes_up) / 1e6,
        gflops=self.client_flops / 1e9, train_seconds=self.train_seconds)


def _progress(total: int, initial: int, desc: str, enabled: bool):
  if not enabled:
    return None
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, dynamic_ncols=True,
              mininterval=1.0 if sys.stderr.isatty() else 10.0)


def evaluate(alg: Algorithm, params, clients, pool: WorkerPool) -> personalized.EvalSummary:
  with tff.framework.get_context_stack().install(pool.eval_context):
    with pool.watch('evaluation'):
      per_client = alg.evaluate(params, [client_data.episode(c) for c in clients])
  return personalized.summarize(per_client)


def _round_flops(alg: Algorithm, batch) -> float:
  """FLOPs of the round's sampled clients (`Algorithm.client_flops`); NaN without a model."""
  if alg.client_flops is None:
    return float('nan')
  try:
    return float(sum(alg.client_flops(c) for c in batch))
  except ValueError as e:    # e.g. a layer the FLOPs model does not know
    logging.log_first_n(logging.WARNING, 'No client FLOPs for %s: %s', 1, alg.display_name, e)
    return float('nan')


def _eval_row(split_name, summary) -> Dict[str, float]:
  return {f'{split_name}_accuracy': summary.accuracy, f'{split_name}_loss': summary.loss,
          f'{split_name}_client_mean': summary.client_mean,
          f'{split_name}_client_std': summary.client_std}


async def _run(alg: Algorithm, data: ProtocolData, *, rounds: int, clients_per_round: int,
               seed: int, eval_every: int, checkpoint_every: int, output_dir: str,
               pool: WorkerPool, show_progress: bool) -> RunResult:
  os.makedirs(output_dir, exist_ok=True)
  state_manager = tff.program.FileProgramStateManager(
      os.path.join(output_dir, 'checkpoints'), keep_total=3)
  train_release = tff.program.GroupingReleaseManager([
      tff.program.CSVFileReleaseManager(os.path.join(output_dir, 'metrics.csv'), key_fieldname='round'),
      tff.program.TensorBoardReleaseManager(os.path.join(output_dir, 'tensorboard')),
  ])
  eval_release = tff.program.CSVFileReleaseManager(
      os.path.join(output_dir, 'eval.csv'), key_fieldname='round')
  per_round = communication.round_bytes(alg.process, min(clients_per_round, len(data.train)))

  with tff.framework.get_context_stack().install(pool.context):
    initial = alg.process.initialize()
    try:
      state, version = await state_manager.load_latest(initial)
    except (ValueError, TypeError) as e:
      raise IncompatibleCheckpointError(
          f'The checkpoint in {output_dir}/checkpoints does not match {alg.display_name} with '
          f'this configuration (different algorithm, model or optimizer?): {str(e)[:200]}... '
          f'Use a new --output_dir, or delete {output_dir}/checkpoints to start over.') from None
    if state is None:
      state, start = initial, 0
    else:
      start = int(version)
      logging.info('Resuming %s from the checkpoint of round %d.', alg.display_name, start)
      print(f'Resuming {alg.display_name} from round {start} ({output_dir}).', file=sys.stderr)

    final = None   # the test summary of the last round, once evaluated
    if start == 0:
      summary = evaluate(alg, alg.params(state), data.test, pool)
      await eval_release.release(_eval_row('test', summary), key=0)

    bar = _progress(rounds, start, alg.display_name, show_progress)
    train_seconds, all_rejected_streak = 0.0, 0
    last_eval = float('nan')
    for round_num in range(start + 1, rounds + 1):
      idx = client_data.sample_clients(len(data.train), clients_per_round, seed, round_num)
      batch = client_data.round_data(alg.train_data, [data.train[i] for i in idx], seed, round_num)
      t0 = time.perf_counter()
      pool.check(f'round {round_num}')
      with pool.watch(f'round {round_num}'):
        state, metrics = alg.process.next(state, batch)
      train_seconds += time.perf_counter() - t0
      n = float(metrics['num_examples'])
      loss = float(metrics['loss_sum']) / n if n > 0 else float('nan')
      accuracy = float(metrics['correct']) / n if n > 0 else float('nan')
      rejected = int(metrics['num_rejected'])
      if rejected:
        logging.warning('Round %d: rejected %d of %d client updates as non-finite; state kept '
                        'for their share.', round_num, rejected, len(idx))
      all_rejected_streak = all_rejected_streak + 1 if rejected == len(idx) else 0
      if all_rejected_streak >= DIVERGENCE_PATIENCE:
        raise TrainingDivergedError(
            f'{alg.display_name}: every client update was non-finite for {DIVERGENCE_PATIENCE} '
            f'rounds (up to round {round_num}); the last good state is in '
            f'{output_dir}/checkpoints. Lower the learning rates (inner_lr / client_lr / server_lr).')
      await train_release.release(collections.OrderedDict(
          train_loss=loss, train_accuracy=accuracy, num_rejected=rejected,
          bytes_down=per_round['bytes_down'], bytes_up=per_round['bytes_up'],
          client_flops=_round_flops(alg, batch),
          round_seconds=time.perf_counter() - t0), key=round_num)
      if round_num % eval_every == 0 or round_num == rounds:
        summary = evaluate(alg, alg.params(state), data.test, pool)
        row = _eval_row('test', summary)
        if data.validation:
          row.update(_eval_row('validation',
                               evaluate(alg, alg.params(state), data.validation, pool)))
        await eval_release.release(row, key=round_num)
        last_eval = summary.accuracy
        if round_num == rounds:
          final = summary
      if round_num % checkpoint_every == 0 or round_num == rounds:
        await state_manager.save(state, round_num)
      if bar is not None:
        bar.set_postfix(loss=f'{loss:.3f}', acc=f'{accuracy:.3f}', test_acc=f'{last_eval:.3f}',
                        refresh=False)
        bar.update(1)
    if bar is not None:
      bar.close()

  if final is None:   # a finished run read back from its checkpoint
    final = evaluate(alg, alg.params(state), data.test, pool)
  done = rounds - start
  history = read_history(os.path.join(output_dir, 'eval.csv'))
  return RunResult(
      algorithm=alg.name, display_name=alg.display_name, rounds=rounds, test=final,
      history=history, bytes_down=per_round['bytes_down'] * rounds,
      bytes_up=per_round['bytes_up'] * rounds,
      train_seconds=train_seconds if done else 0.0, output_dir=output_dir,
      client_flops=read_total(os.path.join(output_dir, 'metrics.csv'), 'client_flops'))


def run(alg: Algorithm, data: ProtocolData, *, rounds: int, clients_per_round: int, seed: int,
        eval_every: int, checkpoint_every: int, output_dir: str,
        pool: Optional[WorkerPool] = None, show_progress: bool = True) -> RunResult:
  """Trains and evaluates `alg`; starts (and stops) a local worker unless a pool is given."""
  kwargs = dict(rounds=rounds, clients_per_round=clients_per_round, seed=seed,
                eval_every=eval_every, checkpoint_every=checkpoint_every,
                output_dir=output_dir, show_progress=show_progress)
  if pool is not None:
    result = asyncio.run(_run(alg, data, pool=pool, **kwargs))
  else:
    with WorkerPool.local(1, log_dir=output_dir) as own:
      result = asyncio.run(_run(alg, data, pool=own, **kwargs))
  write_result(result)
  return result


def read_history(path: str) -> List[Dict[str, float]]:
  """The evaluation rows of a run (all sessions of it, after a resume)."""
  import csv  # pylint: disable=g-import-not-at-top
  with open(path, newline='') as f:
    return [{k: float(v) for k, v in row.items() if v not in ('', None)} for row in csv.DictReader(f)]


def read_total(path: str, column: str) -> float:
  """Sum of a metrics.csv column over all rounds (all sessions of a resumed run)."""
  import csv  # pylint: disable=g-import-not-at-top
  if not os.path.exists(path):
    return float('nan')
  with open(path, newline='') as f:
    return float(sum(float(row[column]) for row in csv.DictReader(f)
                     if row.get(column) not in ('', None)))


def write_result(result: RunResult) -> None:
  with open(os.path.join(result.output_dir, 'results.json'), 'w') as f:
    json.dump({'summary': result.row(), 'history': result.history,
               'test_client_accuracies': result.test.client_accuracies.tolist()},
              f, indent=2, default=float)
