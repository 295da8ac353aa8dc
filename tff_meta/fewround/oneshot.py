"""Fine-tuning via one-shot FL (Guha et al. 2019) at deployment: cross-validated client selection.

FRL (Park et al., "Few-Round Learning for Federated Learning", Sec. 4 "Comparison schemes"
and Appendix D): the model pre-trained on the meta-train classes (as for
fine-tuning via FedAvg) is fine-tuned to the unseen classes "with the scheme
of (Guha et al., 2019) for R rounds", where "the local models are sampled and
aggregated by the ensemble cross-validation (CV) method"; this scheme gets
2K available clients of which the server keeps K (Appendix D: 20 and 10).

Guha et al.'s CV selection: every client trains a local model on part of its
data and reports that model's accuracy on the part it held out; the server
keeps the K clients with the best held-out accuracy. One round here is:

1. `cv_score` (a federated computation, result placed at CLIENTS): each of the
   2K clients takes E local steps from theta_r on the first half of each of its
   support classes (`cv_split`) and scores the result on the other half.
2. The server keeps the K best (ties: lower client index).
3. The ordinary round (`process.build_round`'s `round`) on those K clients'
   full support sets: E local steps from theta_r, support-size weighted mean.

After R rounds, accuracy is over the query sets of all 2K clients (Sec. 4:
"the gathered query sets of all clients").

Choices where the papers are silent or could not be followed:

- **The 2K clients are the K episode clients halved** (`halve`): a client's
  support rows, class by class, are dealt alternately to two clients, the
  alternation carried on from one class to the next; its query rows likewise.
  The total data, and so the query images scored, are those every other
  method sees in the same test episode. (Sampling 2K full-size clients
  would need 2 * 60 images per class, more than FEMNIST-62's rarest test
  class has.) Carrying the alternation over keeps both halves non-empty
  whenever the client has two rows: restarting it at every class sent
  nothing to the second half when every class had one support image.
- **A half without support data is skipped**: it has no local model to
  validate or aggregate, so it is neither scored nor selectable (weight 0);
  its query rows, if any, still count in the accuracy. This happens only for
  a client with a single support image.
- **A half that cannot be validated ranks last**: a CV task whose held-out
  part is empty (a half with one support image) is not run and scores -1,
  as a diverged local model does, instead of an accuracy of 0 that no data
  supports. With these rules no empty batch ever reaches the model (an empty
  batch through group normalization crashed `finetune_oneshot`).
- **Aggregation is the weighted mean of the selected models** at every round,
  not Guha et al.'s ensemble of outputs: a later round must broadcast one
  model.
- A score is the CV accuracy; the CV models are discarded, and the selected
  clients retrain on their whole support set in step 3.

Type signature (G = the round state of `process.build_round`, D = one
client's episode data):
    cv_score: (<G@SERVER, {D}@CLIENTS> -> {float32}@CLIENTS)
"""

from __future__ import annotations

import collections
from typing import Dict, List, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.fewround import process as process_lib
from tff_meta.fewround.model import FewRoundModel
from tff_meta.learning.inner_loop import all_finite


def _halves(y: np.ndarray):
  """Row indices of the two halves: the rows, class by class, dealt alternately.

  The alternation goes on across classes, so per class and in all the halves
  differ by at most one row, and neither is empty when there are two rows.
  """
  order = np.argsort(np.asarray(y), kind='stable')     # class by class, rows in order
  return np.sort(order[0::2]), np.sort(order[1::2])


def _take(client, support_rows, query_rows):
  return collections.OrderedDict(
      support_x=client['support_x'][support_rows], support_y=client['support_y'][support_rows],
      query_x=client['query_x'][query_rows], query_y=client['query_y'][query_rows],
      num_ways=client['num_ways'])


def halve(clients: Sequence[Mapping]) -> List[collections.OrderedDict]:
  """2K clients from K: each client's support and query rows dealt alternately (`_halves`)."""
  out = []
  for client in clients:
    s1, s2 = _halves(client['support_y'])
    q1, q2 = _halves(client['query_y'])
    out += [_take(client, s1, q1), _take(client, s2, q2)]
  return out


def cv_split(client: Mapping) -> collections.OrderedDict:
  """The client's CV task: train on half of each support class, score on the rest.

  Only support data is used; the client's query set stays unseen until the
  final evaluation.
  """
  train, held_out = _halves(client['support_y'])
  return collections.OrderedDict(
      support_x=client['support_x'][train], support_y=client['support_y'][train],
      query_x=client['support_x'][held_out], query_y=client['support_y'][held_out],
      num_ways=client['num_ways'])


def select(scores: Sequence[float], keep: int) -> List[int]:
  """Indices of the `keep` best scores, best first; ties go to the lower index."""
  order = np.argsort(-np.asarray(scores, np.float64), kind='stable')
  return [int(i) for i in order[:keep]]


def build_cv_score(model: FewRoundModel, hp: process_lib.FewRoundHparams,
                   client_data_spec: Mapping, round_type):
  """The `cv_score` federated computation (module docstring, step 1)."""
  data_type = tff.types.tensorflow_to_type(collections.OrderedDict(client_data_spec))

  @tff.tensorflow.computation(round_type, data_type)
  def cv_client(server, data):
    train = process_lib.client_batch(model, data, 'support')
    theta = process_lib.local_update(model, hp, list(server['theta']), train,
                                     server['protos'], server['mask'], 0.0)
    held_out = process_lib.client_batch(model, data, 'query')
    logits = model.classifier.logits(model, theta, held_out.x, held_out.way_mask,
                                     server['protos'], server['mask'])
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), held_out.y),
                      tf.float32)
    score = tf.reduce_sum(correct) / tf.maximum(tf.cast(tf.size(held_out.y), tf.float32), 1.0)
    return tf.where(all_finite(theta), score, -1.0)   # a diverged client is last

  @tff.federated_computation(tff.FederatedType(round_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def cv_score(server, data):
    return tff.federated_map(cv_client, (tff.federated_broadcast(server), data))

  return cv_score


class CVSelection:
  """Deployment by CV client selection: `deploy.deploy_episode`'s signature.

  Attributes:
    keep: K, the clients aggregated per round (of the 2K available).
    selections: per call, per round, the selected indices (for inspection).
  """

  def __init__(self, model: FewRoundModel, hp: process_lib.FewRoundHparams,
               client_data_spec: Mapping, keep: int):
    self.model, self.hp, self.spec, self.keep = model, hp, client_data_spec, keep
    self._cv_score = None
    self.selections: List[List[List[int]]] = []

  def __call__(self, start, round_fn, evaluate, weights, clients, rounds: Sequence[int]
               ) -> Dict[int, float]:
    if not rounds or min(rounds) < 1:
      raise ValueError(f'test rounds must be >= 1, got {list(rounds)}.')
    if self._cv_score is None:
      self._cv_score = build_cv_score(self.model, self.hp, self.spec,
                                      start.type_signature.result)
    available = halve(clients)
    # No empty batch reaches the model: a half without support is skipped (weight 0), one
    # without a held-out image scores -1 unscored, and only halves with a query are evaluated.
    candidates = [i for i, c in enumerate(available) if len(c['support_y'])]
    cv_tasks = [cv_split(available[i]) for i in candidates]
    validated = [j for j, task in enumerate(cv_tasks) if len(task['query_y'])]
    queried = [c for c in available if len(c['query_y'])] or available
    state = start(weights)
    out, chosen = {}, []
    for r in range(1, max(rounds) + 1):
      scores = np.full(len(candidates), -1.0)
      if validated:
        scores[validated] = self._cv_score(state, [cv_tasks[j] for j in validated])
      kept = [candidates[i] for i in select(scores, self.keep)]
      chosen.append(kept)
      state, _ = round_fn(state, [available[i] for i in kept])
      if r in rounds:
        sums = evaluate(state, queried)
        out[r] = float(sums['correct']) / max(float(sums['num_examples']), 1.0)
    self.selections.append(chosen)
    return out
