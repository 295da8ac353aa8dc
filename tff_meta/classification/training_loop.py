"""The training loop as tff.program logic.

- runs the process on a `WorkerPool`: one project-owned local C++ worker by
  default, or several local/remote workers through TFF's mergeable context.
  (`tff.program.NativeFederatedContext` in TFF 0.87 only accepts
  CLIENTS-placed values that come from a `FederatedDataSource` of sequences;
  our client data are structs of tensors, so the loop calls the pool's
  context directly and keeps tff.program's state and release managers);
- runs each round on the `RoundRunner` (`runtime/rounds.py`) that
  its `runtime.execution_plan.ExecutionPlan` picks for the algorithm and the pool: plain,
  resident or pool-resident, all with the results of `process.next`;
  one `Schedule` says on which rounds it evaluates and checkpoints (and so
  when a runner fetches the state), one `RoundSampler` samples the clients;
- names a worker that stops answering (`WorkerUnavailableError`);
- checkpoints the server state with `FileProgramStateManager`; a killed run
  restarts at the round after its last checkpoint, and the metric files drop
  rows past that round before continuing (no duplicates);
- releases per-round training metrics to CSV and TensorBoard
  (`GroupingReleaseManager`), and evaluation metrics to their own CSV and
  TensorBoard run (tensorboard/eval); a differentially private run adds the
  epsilon spent so far to every evaluation row, the progress bar and the
  result (`privacy.Budget`);
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
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow_federated as tff
from absl import logging

from tff_meta.core import provenance
from tff_meta.algorithms import Algorithm
from tff_meta.data.protocol import ClientSplit, ProtocolData
from tff_meta.evaluation import communication, personalized
from tff_meta.core import checkpoints, files
from tff_meta.data import client_data
from tff_meta.core import loop
from tff_meta.classification.round_evaluation import PRIMARY, Evaluation
from tff_meta.classification.client_states import ClientStateStore
from tff_meta.core.logs import note
from tff_meta.classification.privacy import Budget
from tff_meta.runtime.execution_plan import ExecutionPlan
from tff_meta.core.run_folder import (CHECKPOINTS_DIR, CLIENT_STATES_DIR, EVAL_FILE, METRICS_FILE,
                                 RESULTS_FILE, TENSORBOARD_DIR, TENSORBOARD_EVAL_DIR,
                                 read_history, read_total)
from tff_meta.runtime.pool import WorkerPool
from tff_meta.runtime.rounds import RoundResult, RoundRunner

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
  # Differential privacy: epsilon at delta after all rounds; None without DP.
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
    known = [h for h in self.history if not np.isnan(h.get('known_accuracy', np.nan))]
    if known:   # report 003 Sec. 5.3, 6.3: known ("old") clients on their held-out local data
      row['known_accuracy'] = 100 * max(reversed(known), key=lambda h: h['round'])['known_accuracy']
    if self.epsilon is not None:
      row.update(epsilon=self.epsilon, delta=self.delta)
    return row


def _round_flops(alg: Algorithm, batch) -> float:
  """FLOPs of the round's sampled clients (`Algorithm.client_flops`); NaN without a model."""
  if alg.client_flops is None:
    return float('nan')
  try:
    return float(sum(alg.client_flops(c) for c in batch))
  except ValueError as e:    # e.g. a layer the FLOPs model does not know
    logging.log_first_n(logging.WARNING, 'No client FLOPs for %s: %s', 1, alg.display_name, e)
    return float('nan')


@dataclasses.dataclass(frozen=True)
class Schedule:
  """The loop's one stop rule: on which rounds it evaluates and checkpoints.

  Evaluation every `eval_every` rounds and at each of the last
  `final_eval_rounds`; a checkpoint every `checkpoint_every` rounds; both at
  the last round. The runners fetch the state exactly on those rounds
  (`needs_state`).
  """
  rounds: int
  eval_every: int
  checkpoint_every: int
  final_eval_rounds: int = 1

  def evaluates(self, round_num: int) -> bool:
    return (round_num % self.eval_every == 0 or round_num == self.rounds
            or round_num > self.rounds - self.final_eval_rounds)

  def checkpoints(self, round_num: int) -> bool:
    return round_num % self.checkpoint_every == 0 or round_num == self.rounds

  def needs_state(self, round_num: int) -> bool:
    return self.evaluates(round_num) or self.checkpoints(round_num)


class SampledRound(NamedTuple):
  clients: List[ClientSplit]
  batch: List   # the clients' round data, as the process takes it


@dataclasses.dataclass
class RoundSampler:
  """The loop's one client sampling: a round's clients and their data.

  Seeded by (seed, round) (`client_data`), so a resumed run, and rounds
  sampled ahead, get exactly the clients and data of an uninterrupted run. A round is built once: the rounds
  sampled ahead are kept until the loop asks for them (`sample` forgets the
  rounds the loop has finished, `done`).
  """
  kind: str                          # Algorithm.train_data
  clients: Sequence[ClientSplit]     # the training clients
  clients_per_round: int
  seed: int
  resample: bool = False             # resample_support
  max_examples: int = 0              # max_client_examples
  _built: Dict[int, SampledRound] = dataclasses.field(default_factory=dict, repr=False)

  def __post_init__(self):
    if not 1 <= self.clients_per_round <= len(self.clients):
      raise ValueError(f'clients_per_round = {self.clients_per_round} needs 1 to '
                       f'{len(self.clients)} (the training clients).')

  @property
  def num_clients(self) -> int:
    return self.clients_per_round

  def sample(self, round_num: int) -> SampledRound:
    if round_num not in self._built:
      self._built[round_num] = self._build(round_num)
    return self._built[round_num]

  def done(self, round_num: int) -> None:
    """Forgets the rounds up to `round_num`, which the loop has run."""
    for old in [r for r in self._built if r <= round_num]:
      del self._built[old]

  def _build(self, round_num: int) -> SampledRound:
    idx = client_data.sample_clients(len(self.clients), self.clients_per_round, self.seed,
                                     round_num)
    clients = [self.clients[i] for i in idx]
    return SampledRound(clients, client_data.round_data(
        self.kind, clients, self.seed, round_num, resample=self.resample,
        max_examples=self.max_examples))


async def _restore(alg: Algorithm, output_dir: str, state_manager):
  """(state, first round to run - 1, client state store or None) of a new or resumed run."""
  initial = alg.process.initialize()
  state, version = await checkpoints.load_latest(
      state_manager, os.path.join(output_dir, CHECKPOINTS_DIR), initial, alg.display_name)
  store = (ClientStateStore(os.path.join(output_dir, CLIENT_STATES_DIR),
                            alg.process.initial_client_state) if alg.stateful else None)
  if store is not None:
    store.restore(version)   # 0 without a checkpoint
    store.verify()
  if state is None:
    return initial, 0, store
  logging.info('Resuming %s from the checkpoint of round %d.', alg.display_name, int(version))
  return state, int(version), store


def _train(runner: RoundRunner, pool: WorkerPool, store: Optional[ClientStateStore], state,
           round_num: int, sampled: SampledRound) -> RoundResult:
  """Runs one round on `runner`; clients with state take theirs from `store` and put it back."""
  pool.check(f'round {round_num}')
  with pool.watch(f'round {round_num}'):
    if store is None:
      return runner.next(state, round_num, sampled.batch)
    ids = [c.client_id for c in sampled.clients]
    result = runner.next(state, round_num, sampled.batch, store.get(ids))
    store.put(ids, result.client_states, round_num)
    return result


@dataclasses.dataclass
class Divergence:
  """Stops a run whose every client update was non-finite for DIVERGENCE_PATIENCE rounds."""
  alg: Algorithm
  output_dir: str
  streak: int = 0   # rounds in a row with every update rejected

  def check(self, metrics, round_num: int, num_clients: int) -> None:
    rejected = int(metrics['num_rejected'])
    if rejected:
      logging.warning('Round %d: rejected %d of %d client updates as non-finite; state kept '
                      'for their share.', round_num, rejected, num_clients)
    self.streak = self.streak + 1 if rejected == num_clients else 0
    if self.streak >= DIVERGENCE_PATIENCE:
      raise TrainingDivergedError(
          f'{self.alg.display_name}: every client update was non-finite for '
          f'{DIVERGENCE_PATIENCE} rounds (up to round {round_num}); the last good state is in '
          f'{self.output_dir}/checkpoints. Lower the learning rates (inner_lr / client_lr / '
          'server_lr).')


def _train_row(alg: Algorithm, pool, metrics, batch, per_round: dict,
               t0: float) -> collections.OrderedDict:
  """The round's metrics.csv row; `t0` is when the round started."""
  def mean(key):
    n = float(metrics['num_examples'])
    return float(metrics[key]) / n if n > 0 else float('nan')
  return collections.OrderedDict(
      train_loss=mean('loss_sum'), train_accuracy=mean('correct'),
      num_rejected=int(metrics['num_rejected']),
      bytes_down=per_round['bytes_down'], bytes_up=per_round['bytes_up'],
      client_flops=_round_flops(alg, batch), round_seconds=time.perf_counter() - t0,
      worker_rss_mb=pool.resident_mb())


async def _run(alg: Algorithm, data: ProtocolData, *, rounds: int, clients_per_round: int,
               seed: int, eval_every: int, checkpoint_every: int, output_dir: str,
               pool: WorkerPool, show_progress: bool, plan: ExecutionPlan,
               final_eval_rounds: int = 1, resample_support: bool = False,
               max_client_examples: int = 0, privacy: Optional[Budget] = None,
               on_start: Optional[Callable[[], None]] = None) -> RunResult:
  schedule = Schedule(rounds, eval_every, checkpoint_every, final_eval_rounds)
  sampler = RoundSampler(alg.train_data, data.train, clients_per_round, seed, resample_support,
                         max_client_examples)
  per_round = communication.round_bytes(alg.process, sampler.num_clients)
  if resample_support and alg.train_data != 'episode':
    note(f'resample_support has no effect on {alg.display_name}: it trains on all of a '
         'client\'s data.')

  restored = {}

  async def restore():   # after the loop's checks of metrics.csv and eval.csv
    state_manager = restored['manager'] = tff.program.FileProgramStateManager(
        os.path.join(output_dir, CHECKPOINTS_DIR), keep_total=3)
    state, start, restored['store'] = await _restore(alg, output_dir, state_manager)
    evaluation.store = restored['store']
    return state_manager, state, start

  def started(start: int) -> None:
    provenance.record(output_dir, start)
    if on_start is not None:
      on_start()

  def step(state, round_num: int):
    sampled = sampler.sample(round_num)
    t0 = time.perf_counter()
    state, metrics, _ = _train(runner, pool, restored['store'], state, round_num, sampled)
    sampler.done(round_num)
    divergence.check(metrics, round_num, len(sampled.clients))
    return state, _train_row(alg, pool, metrics, sampled.batch, per_round, t0)

  def evaluate_round(state, round_num: int):
    nonlocal final, last_eval
    row, summary = evaluation.row(state, round_num)
    last_eval = summary.accuracy
    final = summary if round_num == rounds else final
    return row

  async def after_save(round_num: int) -> None:
    store = restored['store']
    if store is not None:
      store.prune(min(await restored['manager'].get_versions() or [round_num]))

  evaluation = Evaluation(alg, data, pool, seed, None, privacy)
  final = None   # the test summary of the last round, once evaluated
  last_eval, divergence = float('nan'), Divergence(alg, output_dir)
  runner = plan.runner(alg, pool, num_clients=sampler.num_clients,
                       round_batch=lambda r: sampler.sample(r).batch,
                       needs_state=schedule.needs_state)
  with tff.framework.get_context_stack().install(pool.context), runner:
    result = await loop.run(
        name=alg.display_name, folder=output_dir, initial=None, step=step, total=rounds,
        checkpoint_every=checkpoint_every, keep_total=3, unit='round', restore=restore,
        step_file=METRICS_FILE, step_tensorboard=TENSORBOARD_DIR,
        evaluation=loop.Evaluation(evaluate_round, schedule.evaluates, EVAL_FILE,
                                   TENSORBOARD_EVAL_DIR),
        before_save=lambda n: restored['store'] and restored['store'].flush(n),   # states first
        after_save=after_save, on_start=started, show_progress=show_progress,
        postfix=lambda row, _, n: _postfix(row, last_eval, privacy, n))
    state = result.state

  if final is None:   # a finished run read back from its checkpoint
    with tff.framework.get_context_stack().install(pool.context):
      _, final = evaluation.row(state, rounds)
  return _result(alg, rounds, final, per_round, output_dir, final_eval_rounds, privacy)


def _postfix(row, last_eval: float, privacy: Optional[Budget], round_num: int) -> dict:
  postfix = dict(loss=f'{row["train_loss"]:.3f}', acc=f'{row["train_accuracy"]:.3f}',
                 test_acc=f'{last_eval:.3f}')
  if privacy is not None:
    postfix['eps'] = f'{privacy.epsilon(round_num):.2f}'
  return postfix


def _result(alg: Algorithm, rounds: int, final: personalized.EvalSummary, per_round: dict,
            output_dir: str, final_eval_rounds: int, privacy: Optional[Budget]) -> RunResult:
  """The run's result from its files: train_seconds and client_flops are sums over
  metrics.csv, so a resumed or re-read run counts every round of every session once."""
  metrics = os.path.join(output_dir, METRICS_FILE)
  history = read_history(os.path.join(output_dir, EVAL_FILE))
  last = [h[f'{PRIMARY}_accuracy'] for h in history
          if h.get('round', -1) > rounds - final_eval_rounds and f'{PRIMARY}_accuracy' in h]
  return RunResult(
      algorithm=alg.name, display_name=alg.display_name, rounds=rounds, test=final,
      history=history, bytes_down=per_round['bytes_down'] * rounds,
      bytes_up=per_round['bytes_up'] * rounds,
      train_seconds=read_total(metrics, 'round_seconds'), output_dir=output_dir,
      client_flops=read_total(metrics, 'client_flops'),
      final_rounds_accuracy=float(np.mean(last)) if final_eval_rounds > 1 and last else float('nan'),
      epsilon=privacy.epsilon(rounds) if privacy is not None else None,
      delta=privacy.delta if privacy is not None else None)


def run(alg: Algorithm, data: ProtocolData, *, rounds: int, clients_per_round: int, seed: int,
        eval_every: int, checkpoint_every: int, output_dir: str,
        pool: Optional[WorkerPool] = None, show_progress: bool = True,
        final_eval_rounds: int = 1, plan: ExecutionPlan,
        resample_support: bool = False, max_client_examples: int = 0,
        privacy: Optional[Budget] = None,
        on_start: Optional[Callable[[], None]] = None) -> RunResult:
  """Trains and evaluates `alg`; starts (and stops) a local worker unless a pool is given.

  `plan` (`runtime.execution_plan`) says how the rounds execute: resident
  state, clients per TFF call and the local worker's calls at once; every
  plan gives the same results.
  `resample_support` draws each training
  client's support/query split afresh every round (`protocol.resample_split`);
  `max_client_examples` > 0 keeps at most that many of a client's examples a round.
  `privacy` (a DP run's `privacy.Budget`) adds epsilon to eval.csv, the
  progress bar and the result.
  `on_start()` runs once the checkpoint (if any)
  has loaded, before the run writes anything (e.g. to save its config).
  """
  kwargs = dict(rounds=rounds, clients_per_round=clients_per_round, seed=seed,
                eval_every=eval_every, checkpoint_every=checkpoint_every,
                output_dir=output_dir, show_progress=show_progress,
                final_eval_rounds=final_eval_rounds, plan=plan,
                resample_support=resample_support, max_client_examples=max_client_examples,
                privacy=privacy, on_start=on_start)
  if pool is not None:
    result = asyncio.run(_run(alg, data, pool=pool, **kwargs))
  else:
    with WorkerPool.local(1, log_dir=output_dir,
                          max_concurrent_calls=plan.max_concurrent_calls) as own:
      result = asyncio.run(_run(alg, data, pool=own, **kwargs))
  write_result(result)
  return result


def write_result(result: RunResult) -> None:
  files.write_json(os.path.join(result.output_dir, RESULTS_FILE),
                   {'summary': result.row(), 'history': result.history,
                    'test_client_accuracies': result.test.client_accuracies.tolist()},
                   indent=2, default=float)
