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
  (`GroupingReleaseManager`), and evaluation metrics to their own CSV and
  TensorBoard run (tensorboard/eval); a differentially private run adds the
  epsilon spent so far to every evaluation row, the progress bar and the
  result (`privacy.Budget`, issue #18);
- shows a progress bar with the round, loss and accuracy;
- rejects non-finite client updates (the process keeps the state) and stops
  with a clear error if training diverges;
- for algorithms with client state, keeps each client's state in a
  `ClientStateStore` (keyed by client id, checkpointed with the server state,
  restored exactly on resume);
- scores new clients (test, validation) and, when the protocol holds out a
  local test set per training client, known clients (`known_*` columns, or
  `test_*` when there are no new clients, as in FedEC's protocol).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import sys
import time
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow_federated as tff
from absl import logging

from tff_meta.algorithms import Algorithm, multi_round, stateful
from tff_meta.data.protocol import ProtocolData
from tff_meta.evaluation import communication, personalized
from tff_meta.program import checkpoints, client_data, files
from tff_meta.program.config import ConfigError
from tff_meta.program.client_states import ClientStateStore
from tff_meta.program.privacy import Budget
from tff_meta.run_folder import (CHECKPOINTS_DIR, CLIENT_STATES_DIR, EVAL_FILE, METRICS_FILE,
                                 RESULTS_FILE, TENSORBOARD_DIR, TENSORBOARD_EVAL_DIR)
from tff_meta.runtime import pool_resident, resident
from tff_meta.runtime.pool import WorkerPool

DIVERGENCE_PATIENCE = 5


class TrainingDivergedError(RuntimeError):
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
  # Mean accuracy of the evaluations in the last `final_eval_rounds` rounds
  # (FedEC Table 2 averages the final 10); NaN = just the final one.
  final_rounds_accuracy: float = float('nan')
  # Differential privacy (issue #18): epsilon at delta after all rounds; None without DP.
  epsilon: Optional[float] = None
  delta: Optional[float] = None

  def row(self) -> Dict[str, float]:
    accuracy = (self.final_rounds_accuracy if not np.isnan(self.final_rounds_accuracy)
                else self.test.accuracy)
    row = collections.OrderedDict(
        method=self.display_name, accuracy=100 * accuracy,
        client_mean=100 * self.test.client_mean, client_std=100 * self.test.client_std,
        test_clients=len(self.test.client_accuracies), query_examples=self.test.num_examples,
        rounds=self.rounds, mb_sent=(self.bytes_down + self.bytes_up) / 1e6,
        gflops=self.client_flops / 1e9, train_seconds=self.train_seconds)
    if self.epsilon is not None:
      row.update(epsilon=self.epsilon, delta=self.delta)
    return row


def _progress(total: int, initial: int, desc: str, enabled: bool):
  if not enabled:
    return None
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, dynamic_ncols=True,
              mininterval=1.0 if sys.stderr.isatty() else 10.0)


def evaluate(alg: Algorithm, params, clients, pool: WorkerPool, *, known: bool = False,
             store: Optional[ClientStateStore] = None, seed: int = 0) -> personalized.EvalSummary:
  """Personalized evaluation of `clients`.

  New clients adapt on their support set and are scored on their query set;
  known (training) clients adapt on all their training data and are scored on
  their held-out local test set, starting from their own stored state.
  """
  episodes = [client_data.episode(c.known_split() if known else c) for c in clients]
  with tff.framework.get_context_stack().install(pool.eval_context):
    with pool.watch('evaluation'):
      if alg.stateful:
        initial = alg.process.initial_client_state
        if known and store is not None:
          states = store.get([c.client_id for c in clients])
        else:
          states = [initial] * len(clients)
        stored = store.sample_known(alg.num_candidates, seed) if store is not None else []
        candidates = stateful.stack_states(stored, alg.num_candidates, initial)
        per_client = alg.evaluate(params, candidates, states, episodes)
      else:
        per_client = alg.evaluate(params, episodes)
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


def round_path(alg: Algorithm, pool: WorkerPool, store, rounds_per_call: int,
               resident_state: bool, num_clients: int, round_batch, must_stop):
  """The fast round path for this run, or None for TFF's plain `process.next`.

  `resident_state` (the default, issue #13) keeps the server state on the
  worker: `ResidentRounds` on one worker, `PoolResidentRounds` on a pool. It
  falls back to the plain path, with a one-line note, where it cannot apply:
  with `rounds_per_call` > 1 (which runs its own chunks) and for algorithms
  with client state (`store`) on a pool. Every path gives the same results.
  `round_batch(round_num)` gives a round's client data (`num_clients` of
  them); `must_stop(round_num)` says on which rounds the caller needs the
  state. The benchmarks call this too, so that their `default` mode times
  the path a run takes.
  A process with a `model_aggregator` (DP, secure aggregation: its state
  changes in ways the fused sum cannot relay) runs one round per call,
  resident on one worker, through TFF's mergeable context on a pool.
  """
  if getattr(alg.process, 'model_aggregator', None) is not None:
    if rounds_per_call > 1 or (resident_state and len(pool.addresses) > 1):
      note(f'{alg.display_name}: with DP or secure aggregation the round runs one per TFF call'
           + (' with the server state resident on the worker' if len(pool.addresses) == 1
              and resident_state else ' through TFF\'s plain execution context')
           + ' (rounds_per_call and the pool\'s relayed sums need the plain mean).')
    rounds_per_call = 1
    resident_state = resident_state and len(pool.addresses) == 1
  if len(pool.addresses) > 1 and (rounds_per_call > 1 or store is not None):
    if rounds_per_call > 1:
      raise ConfigError(
          f'On a worker pool ({len(pool.addresses)} workers) rounds_per_call must be 1; '
          'set rounds_per_call = 1 (the pool keeps the state resident on worker 0).')
    if resident_state:
      note(f'{alg.display_name} keeps state per client, so on a pool of '
           f'{len(pool.addresses)} workers its rounds go through TFF\'s mergeable context '
           '(resident server state needs one worker for such algorithms).')
    resident_state = False
  if rounds_per_call > 1:
    if store is not None:
      raise ConfigError(
          f'rounds_per_call={rounds_per_call} needs an algorithm without client state '
          f'({alg.display_name} keeps state per client, which changes between the unrolled '
          'rounds); use resident_state = true instead, or rounds_per_call = 1.')
    if resident_state:
      note(f'rounds_per_call={rounds_per_call}: the server state crosses once per call of '
           f'{rounds_per_call} rounds instead of staying resident on the worker.')
    resident_state = False
  if rounds_per_call == 1 and not resident_state:
    return None
  if resident_state and len(pool.addresses) > 1:
    return pool_resident.PoolResidentRounds(alg.process, pool.addresses, num_clients,
                                            round_batch, must_stop)
  if resident_state:
    return resident.ResidentRounds(alg.process, pool.addresses[0], num_clients, round_batch,
                                   must_stop)
  return multi_round.ChunkedRounds(alg.process, rounds_per_call, round_batch, must_stop)


def note(message: str) -> None:
  """A one-line note on stderr (once per message per process)."""
  if message not in _NOTED:
    _NOTED.add(message)
    print(f'note: {message}', file=sys.stderr)


_NOTED = set()


async def _run(alg: Algorithm, data: ProtocolData, *, rounds: int, clients_per_round: int,
               seed: int, eval_every: int, checkpoint_every: int, output_dir: str,
               pool: WorkerPool, show_progress: bool, final_eval_rounds: int = 1,
               rounds_per_call: int = 1, resident_state: bool = True,
               resample_support: bool = False,
               privacy: Optional[Budget] = None,
               on_start: Optional[Callable[[], None]] = None) -> RunResult:
  os.makedirs(output_dir, exist_ok=True)
  for name in (METRICS_FILE, EVAL_FILE):   # a damaged file stops the run before any write
    checkpoints.check_csv(os.path.join(output_dir, name), 'round')
  state_manager = tff.program.FileProgramStateManager(
      os.path.join(output_dir, CHECKPOINTS_DIR), keep_total=3)
  per_round = communication.round_bytes(alg.process, min(clients_per_round, len(data.train)))
  has_known = bool(data.train) and data.train[0].holdout is not None
  # FedEC's protocol has no new clients: its test set is the training clients'
  # local test sets, reported as test_*; with new clients too they are known_*.
  known_name = 'known' if data.test else 'test'
  primary = 'test'
  if resample_support and alg.train_data != 'episode':
    note(f'resample_support has no effect on {alg.display_name}: it trains on all of a '
         'client\'s data.')

  def round_clients(round_num):
    return client_data.sample_clients(len(data.train), clients_per_round, seed, round_num)

  def round_batch(round_num, idx=None):
    idx = round_clients(round_num) if idx is None else idx
    return client_data.round_data(alg.train_data, [data.train[i] for i in idx], seed, round_num,
                                  resample=resample_support)

  def evaluate_all(round_num):
    params = alg.params(state)
    row, summaries = {}, {}
    for split_name, clients, known in (('test', data.test, False),
                                       ('validation', data.validation, False),
                                       (known_name, data.train if has_known else [], True)):
      if clients:
        summaries[split_name] = evaluate(alg, params, clients, pool, known=known, store=store,
                                         seed=seed * 1000003 + round_num)
        row.update(_eval_row(split_name, summaries[split_name]))
    if privacy is not None:   # issue #18: the privacy spent by the rounds so far
      row['epsilon'] = privacy.epsilon(round_num)
    return row, summaries[primary]

  with tff.framework.get_context_stack().install(pool.context):
    initial = alg.process.initialize()
    state, version = await checkpoints.load_latest(
        state_manager, os.path.join(output_dir, CHECKPOINTS_DIR), initial, alg.display_name)
    store = (ClientStateStore(os.path.join(output_dir, CLIENT_STATES_DIR),
                              alg.process.initial_client_state) if alg.stateful else None)
    if store is not None:
      store.restore(version)   # 0 without a checkpoint
      store.verify()
    if on_start is not None:
      on_start()
    train_release = tff.program.GroupingReleaseManager([
        tff.program.CSVFileReleaseManager(os.path.join(output_dir, METRICS_FILE),
                                          key_fieldname='round'),
        tff.program.TensorBoardReleaseManager(os.path.join(output_dir, TENSORBOARD_DIR)),
    ])
    eval_release = tff.program.GroupingReleaseManager([
        tff.program.CSVFileReleaseManager(os.path.join(output_dir, EVAL_FILE),
                                          key_fieldname='round'),
        tff.program.TensorBoardReleaseManager(os.path.join(output_dir, TENSORBOARD_EVAL_DIR)),
    ])
    if state is None:
      state, start = initial, 0
    else:
      start = int(version)
      logging.info('Resuming %s from the checkpoint of round %d.', alg.display_name, start)
      print(f'Resuming {alg.display_name} from round {start} ({output_dir}).', file=sys.stderr)

    final = None   # the test summary of the last round, once evaluated
    if start == 0:
      row, _ = evaluate_all(0)
      await eval_release.release(row, key=0)

    chunked = round_path(alg, pool, store, rounds_per_call, resident_state,
                         min(clients_per_round, len(data.train)), round_batch,
                         lambda r: (r % eval_every == 0 or r % checkpoint_every == 0
                                    or r > rounds - final_eval_rounds))
    bar = _progress(rounds, start, alg.display_name, show_progress)
    train_seconds, all_rejected_streak = 0.0, 0
    last_eval = float('nan')
    for round_num in range(start + 1, rounds + 1):
      idx = round_clients(round_num)
      batch = round_batch(round_num, idx)
      t0 = time.perf_counter()
      pool.check(f'round {round_num}')
      with pool.watch(f'round {round_num}'):
        if store is not None:
          ids = [data.train[i].client_id for i in idx]
          if chunked is not None:   # resident_state: client states still cross every round
            state, client_states, metrics = chunked.next(state, round_num,
                                                         (store.get(ids), batch))
          else:
            state, client_states, metrics = alg.process.next(state, store.get(ids), batch)
          store.put(ids, client_states, round_num)
        elif chunked is not None:   # rounds_per_call > 1 or resident_state (issue #8)
          state, metrics = chunked.next(state, round_num, (batch,))   # batch built once
        else:
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
      if (round_num % eval_every == 0 or round_num == rounds
          or round_num > rounds - final_eval_rounds):
        row, summary = evaluate_all(round_num)
        await eval_release.release(row, key=round_num)
        last_eval = summary.accuracy
        if round_num == rounds:
          final = summary
      if round_num % checkpoint_every == 0 or round_num == rounds:
        if store is not None:   # client states first: a checkpoint implies its states
          store.flush(round_num)
        await state_manager.save(state, round_num)
        if store is not None:
          store.prune(min(await state_manager.get_versions() or [round_num]))
      if bar is not None:
        postfix = dict(loss=f'{loss:.3f}', acc=f'{accuracy:.3f}', test_acc=f'{last_eval:.3f}')
        if privacy is not None:
          postfix['eps'] = f'{privacy.epsilon(round_num):.2f}'
        bar.set_postfix(refresh=False, **postfix)
        bar.update(1)
    if bar is not None:
      bar.close()
    if chunked is not None:
      chunked.close()

  if final is None:   # a finished run read back from its checkpoint
    with tff.framework.get_context_stack().install(pool.context):
      _, final = evaluate_all(rounds)
  done = rounds - start
  history = read_history(os.path.join(output_dir, EVAL_FILE))
  last = [h[f'{primary}_accuracy'] for h in history
          if h.get('round', -1) > rounds - final_eval_rounds and f'{primary}_accuracy' in h]
  return RunResult(
      algorithm=alg.name, display_name=alg.display_name, rounds=rounds, test=final,
      history=history, bytes_down=per_round['bytes_down'] * rounds,
      bytes_up=per_round['bytes_up'] * rounds,
      train_seconds=train_seconds if done else 0.0, output_dir=output_dir,
      client_flops=read_total(os.path.join(output_dir, METRICS_FILE), 'client_flops'),
      final_rounds_accuracy=float(np.mean(last)) if final_eval_rounds > 1 and last else float('nan'),
      epsilon=privacy.epsilon(rounds) if privacy is not None else None,
      delta=privacy.delta if privacy is not None else None)


def run(alg: Algorithm, data: ProtocolData, *, rounds: int, clients_per_round: int, seed: int,
        eval_every: int, checkpoint_every: int, output_dir: str,
        pool: Optional[WorkerPool] = None, show_progress: bool = True,
        final_eval_rounds: int = 1, rounds_per_call: int = 1,
        resident_state: bool = True, resample_support: bool = False,
        privacy: Optional[Budget] = None,
        on_start: Optional[Callable[[], None]] = None) -> RunResult:
  """Trains and evaluates `alg`; starts (and stops) a local worker unless a pool is given.

  `rounds_per_call` > 1 runs that many rounds per TFF call (`multi_round`);
  `resident_state` keeps the server state on the worker between rounds
  (`runtime.resident`), fetched on evaluation and checkpoint rounds. Both give
  the results of single rounds. `resample_support` draws each training
  client's support/query split afresh every round (`protocol.resample_split`).
  `privacy` (a DP run's `privacy.Budget`) adds epsilon to eval.csv, the
  progress bar and the result.
  `on_start()` runs once the checkpoint (if any)
  has loaded, before the run writes anything (e.g. to save its config).
  """
  kwargs = dict(rounds=rounds, clients_per_round=clients_per_round, seed=seed,
                eval_every=eval_every, checkpoint_every=checkpoint_every,
                output_dir=output_dir, show_progress=show_progress,
                final_eval_rounds=final_eval_rounds, rounds_per_call=rounds_per_call,
                resident_state=resident_state, resample_support=resample_support,
                privacy=privacy, on_start=on_start)
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
  files.write_json(os.path.join(result.output_dir, RESULTS_FILE),
                   {'summary': result.row(), 'history': result.history,
                    'test_client_accuracies': result.test.client_accuracies.tolist()},
                   indent=2, default=float)
