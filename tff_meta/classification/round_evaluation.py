"""The evaluation rows of the image tasks' training loop (eval.csv).

Personalized evaluation (Chen et al. 2018, "Federated Meta-Learning with Fast
Convergence and Efficient Communication", arXiv:1802.07876): new clients adapt
on their support set and are scored on their query set; known clients on their
held-out local data. `Evaluation.row` gives a round's row of every split.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow_federated as tff

from tff_meta.algorithms import Algorithm, stateful
from tff_meta.data import client_data
from tff_meta.data.protocol import ClientSplit, ProtocolData
from tff_meta.evaluation import personalized
from tff_meta.classification.client_states import ClientStateStore
from tff_meta.classification.privacy import Budget
from tff_meta.runtime.pool import WorkerPool

PRIMARY = 'test'   # the split whose accuracy a run reports
# Evaluation calls. The worker runs a call's clients at once, so a call's
# memory grows with its examples and its clients' models: one call over
# every test client of the FEMNIST CNN's Meta-SGD cell reached 15.9 GB
# (docs/RESULTS.md), 8 Shakespeare roles of thousands of sequences each
# 16.5 GB. A call takes clients while their support + query examples stay
# within EVAL_EXAMPLES_PER_CALL (always at least one client) and at most
# EVAL_CLIENTS_PER_CALL of them (each holds its own adapted model); inside a
# client, the slices of `learning.inner_loop` bound the activations. Each client
# is scored independently, so the results do not depend on the calls.
EVAL_EXAMPLES_PER_CALL = 2048
EVAL_CLIENTS_PER_CALL = 8


def evaluate(alg: Algorithm, params, clients, pool: WorkerPool, *, known: bool = False,
             store: Optional[ClientStateStore] = None, seed: int = 0) -> personalized.EvalSummary:
  """Personalized evaluation of `clients`.

  New clients adapt on their support set and are scored on their query set;
  known (training) clients adapt on all their training data and are scored on
  their held-out local test set, starting from their own stored state.
  """
  episodes = [client_data.episode(c.known_split() if known else c) for c in clients]
  per_client = []
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
      sizes = [len(e['support_y']) + len(e['query_y']) for e in episodes]
      for chunk in eval_calls(sizes, EVAL_EXAMPLES_PER_CALL, EVAL_CLIENTS_PER_CALL):
        if alg.stateful:
          per_client += list(alg.evaluate(params, candidates, states[chunk], episodes[chunk]))
        else:
          per_client += list(alg.evaluate(params, episodes[chunk]))
  return personalized.summarize(per_client)


def eval_calls(sizes: Sequence[int], max_examples: int, max_clients: int) -> List[slice]:
  """Consecutive runs of clients, one per evaluation call: each adds clients (of `sizes`
  examples) while the total stays within `max_examples` and the count within
  `max_clients`; a client larger than the budget gets a call of its own."""
  calls, start, total = [], 0, 0
  for i, size in enumerate(sizes):
    if i > start and (total + size > max_examples or i - start >= max_clients):
      calls.append(slice(start, i))
      start, total = i, 0
    total += size
  if start < len(sizes):
    calls.append(slice(start, len(sizes)))
  return calls


def _eval_row(split_name, summary) -> Dict[str, float]:
  return {f'{split_name}_accuracy': summary.accuracy, f'{split_name}_loss': summary.loss,
          f'{split_name}_client_mean': summary.client_mean,
          f'{split_name}_client_std': summary.client_std}


@dataclasses.dataclass
class Evaluation:
  """The evaluation row of a round: new clients (test, validation) and known ones."""
  alg: Algorithm
  data: ProtocolData
  pool: WorkerPool
  seed: int
  store: Optional[ClientStateStore] = None
  privacy: Optional[Budget] = None

  def splits(self) -> List[Tuple[str, Sequence[ClientSplit], bool]]:
    """(name, clients, known) of each split it scores: new clients (test, validation), then
    the known clients' held-out sets when the protocol keeps them."""
    data = self.data
    has_known = bool(data.train) and data.train[0].sizes()[2] is not None
    # FedEC's protocol has no new clients: its test set is the training clients'
    # local test sets, reported as test_*; with new clients too they are known_*.
    known_name = 'known' if data.test else 'test'
    candidates = (('test', data.test, False), ('validation', data.validation, False),
                  (known_name, data.train if has_known else [], True))
    return [(name, clients, known) for name, clients, known in candidates if clients]

  def summary(self, params, split: Tuple[str, Sequence[ClientSplit], bool],
              round_num: int) -> personalized.EvalSummary:
    """The evaluation of `params` (after round `round_num`) on one of `splits()`."""
    _, clients, known = split
    return evaluate(self.alg, params, clients, self.pool, known=known, store=self.store,
                    seed=self.seed * 1000003 + round_num)

  def row(self, state, round_num: int) -> Tuple[Dict[str, float], personalized.EvalSummary]:
    """(eval.csv row, the test summary) of `state` after round `round_num`."""
    params = self.alg.params(state)
    row, summaries = {}, {}
    for split in self.splits():
      summaries[split[0]] = self.summary(params, split, round_num)
      row.update(_eval_row(split[0], summaries[split[0]]))
    if self.privacy is not None:   # the privacy spent by the rounds so far
      row['epsilon'] = self.privacy.epsilon(round_num)
    row['worker_rss_mb'] = self.pool.resident_mb()
    return row, summaries[PRIMARY]
