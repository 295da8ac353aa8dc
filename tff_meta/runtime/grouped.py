"""Many clients per TFF call: the client work of a group of clients in one computation.

TFF's worker runs each CLIENTS-placed value of a `federated_map` as its own
call. With many small clients per round that costs a few ms of executor work
per client, and the per-client calls leave a core idle (docs/RESULTS.md,
the scaling benchmark). A *grouped* round sends each call a group of clients
instead of one:

    next(state@SERVER, groups@CLIENTS):   # each group = several clients' data
      params = federated_broadcast(get_params(state))
      sums   = federated_map(group_update, (params, groups))
      total  = federated_sum(sums)         # the same single aggregation stage
      ...                                  # the same server step and metrics

`grouped_process(process)` builds this round with `process.build_round`,
the builder of every algorithm's round, from the process's declared parts:
`group_update` runs the algorithm's unchanged per-client step
(`process.client_work`: the client work, its weighting and its rejection;
`algorithms/process.py`) for every client of the group in a
`tf.while_loop` whose body holds the whole client step, tapes included, so
MAML's second-order gradient is taken inside one iteration and never
through the loop. Each client's contribution (weighted update, weight,
metrics, `num_clients` = 1, `num_rejected`) is added to the group's sum in
the loop, so `total` equals the ungrouped round's sum up to the order of the
float additions, and the round's counts still count clients.
`parallel_iterations` lets the TF runtime overlap that many clients of a
group (the cores a per-client call leaves idle), while the additions keep
the memory to that many clients' work.

A group's data (`group_spec`): each per-client tensor with a variable
leading dimension (`float32[?,28,28,1]`) is the group's clients' tensors
concatenated, and `rows[i, j]` is client i's row count of the j-th such
tensor; a fixed-shape tensor is stacked (`[n, ...]`). Groups of one round
may differ in size. With client state (`algorithms.stateful`), a group's
state is its clients' states stacked, and the new states come back stacked.

DP and secure aggregation need each client's update as its own record
(clipping, the secure sum's per-client range), so a process with a
`model_aggregator` is never grouped (`GroupingError`; docs/DECISIONS.md).
Whether to group, and how many clients per call, is the execution plan's
choice (`runtime/execution_plan.py`); the algorithm declares nothing about it.

Type signatures (D = one client's data, G = a group's data = <data=D with
leading dimensions concatenated, rows=int32[?,R]>, C = one client's state,
C* = states stacked, T = one client's contribution):
    group_update: (<P, G> -> T), or (<P, C*, G> -> <T, C*>) with client state
"""

from __future__ import annotations

import collections
import functools
from typing import List, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms import process as process_lib
from tff_meta.algorithms.base import FederatedProcess

# Clients of a group the TF runtime may run at once (while_loop's parallel_iterations).
PARALLEL_CLIENTS = 4


class GroupingError(ValueError):
  """A process that cannot run several clients per call (module docstring)."""


def refuse_aggregator() -> None:
  raise GroupingError(
      'Several clients per TFF call need the default aggregator: DP and secure aggregation '
      'take each client\'s update as its own record (clipped before any sum); use '
      'clients_per_call = 1.')


def ragged_keys(data_spec: Mapping[str, tf.TensorSpec]) -> List[str]:
  """The data keys whose leading dimension varies by client (concatenated in a group)."""
  return [k for k, s in data_spec.items() if s.shape.rank and s.shape[0] is None]


def group_spec(data_spec: Mapping[str, tf.TensorSpec]) -> collections.OrderedDict:
  """The spec of a group's data (module docstring) from one client's `data_spec`."""
  ragged = ragged_keys(data_spec)
  data = collections.OrderedDict(
      (k, s if k in ragged else tf.TensorSpec([None, *s.shape], s.dtype))
      for k, s in data_spec.items())
  return collections.OrderedDict(data=data, rows=tf.TensorSpec([None, len(ragged)], tf.int32))


def stacked_spec(spec):
  """`spec` (a structure of TensorSpecs) with a leading dimension of any size."""
  return tf.nest.map_structure(lambda s: tf.TensorSpec([None, *s.shape], s.dtype), spec)


def group_sizes(num_clients: int, clients_per_call: int) -> List[int]:
  """Sizes of the fewest groups of at most `clients_per_call`, as equal as possible."""
  if num_clients < 1 or clients_per_call < 1:
    raise ValueError(f'Need clients and clients_per_call >= 1, got {num_clients}, '
                     f'{clients_per_call}.')
  groups = -(-num_clients // clients_per_call)
  base, extra = divmod(num_clients, groups)
  return [base + (1 if i < extra else 0) for i in range(groups)]


def _split(items: Sequence, sizes: Sequence[int]) -> List[Sequence]:
  offsets = np.cumsum([0, *sizes])
  return [items[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def pack_group(clients: Sequence[Mapping], data_spec: Mapping[str, tf.TensorSpec]):
  """One group's data (numpy) from its clients' data, in `group_spec(data_spec)`'s layout."""
  ragged = ragged_keys(data_spec)
  data = collections.OrderedDict()
  for k, s in data_spec.items():
    arrays = [np.asarray(c[k], s.dtype.as_numpy_dtype) for c in clients]
    data[k] = np.concatenate(arrays) if k in ragged else np.stack(arrays)
  rows = np.array([[len(c[k]) for k in ragged] for c in clients], np.int32)
  return collections.OrderedDict(data=data, rows=rows.reshape(len(clients), len(ragged)))


def split_groups(batch: Sequence, clients_per_call: int) -> List[Sequence]:
  """A round's clients (in order) as the groups of at most `clients_per_call` that
  `pack_groups` packs."""
  return _split(list(batch), group_sizes(len(batch), clients_per_call))


def pack_groups(batch: Sequence[Mapping], data_spec, clients_per_call: int) -> List:
  """A round's client data as groups of at most `clients_per_call` clients."""
  return [pack_group(g, data_spec) for g in split_groups(batch, clients_per_call)]


def stack_states(states: Sequence, clients_per_call: int) -> List:
  """A round's client states as the groups' stacked states (the groups of `pack_groups`)."""
  return [tf.nest.map_structure(lambda *xs: np.stack([np.asarray(x) for x in xs]), *g)
          for g in _split(list(states), group_sizes(len(states), clients_per_call))]


def unstack_states(groups: Sequence) -> List:
  """The clients' states, in order, from the groups' stacked states."""
  out = []
  for g in groups:
    flat = [np.asarray(x) for x in tf.nest.flatten(g)]
    for i in range(len(flat[0]) if flat else 0):
      out.append(tf.nest.pack_sequence_as(g, [x[i] for x in flat]))
  return out


def _zeros(type_spec: tff.Type):
  return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                               tff.types.type_to_tf_tensor_specs(type_spec))


def group_work(client_work, data_spec: Mapping[str, tf.TensorSpec], contribution_type: tff.Type,
               params, group, client_states=None, *, parallel: int = 0):
  """Pure TF: the summed contributions of a group's clients (and their new states, stacked).

  `client_work` is the per-client step (`(params, data) -> contribution` or,
  with `client_states`, `(params, state, data) -> (contribution, new_state)`);
  `contribution_type` the TFF type of one client's contribution; `parallel`
  the clients TF may run at once (0 = `PARALLEL_CLIENTS`).
  """
  ragged = ragged_keys(data_spec)
  rows = group['rows']
  starts = tf.cumsum(rows, axis=0, exclusive=True)
  num_clients = tf.shape(rows)[0]

  def client_data(i):
    data = collections.OrderedDict()
    for k, s in data_spec.items():
      if k in ragged:
        j = ragged.index(k)
        value = group['data'][k][starts[i, j]:starts[i, j] + rows[i, j]]
      else:
        value = group['data'][k][i]
      value.set_shape(s.shape)
      data[k] = value
    return data

  zeros = _zeros(contribution_type)
  stateful = client_states is not None
  if stateful:
    state_leaves = tf.nest.flatten(client_states)
    arrays = [tf.TensorArray(x.dtype, size=num_clients, element_shape=x.shape[1:])
              for x in state_leaves]
  else:
    arrays = []

  def body(i, total, arrays):
    if stateful:
      state = tf.nest.pack_sequence_as(client_states, [x[i] for x in state_leaves])
      contribution, new_state = client_work(params, state, client_data(i))
      arrays = [a.write(i, tf.cast(x, a.dtype))
                for a, x in zip(arrays, tf.nest.flatten(new_state))]
    else:
      contribution = client_work(params, client_data(i))
    flat = [tf.cast(c, z.dtype) for c, z in zip(tf.nest.flatten(contribution),
                                                 tf.nest.flatten(zeros))]
    total = [t + c for t, c in zip(total, flat)]
    return i + 1, total, arrays

  _, total, arrays = tf.while_loop(
      lambda i, *_: i < num_clients, body, (tf.constant(0), tf.nest.flatten(zeros), arrays),
      parallel_iterations=parallel or PARALLEL_CLIENTS)
  total = tf.nest.pack_sequence_as(zeros, total)
  if not stateful:
    return total
  return total, tf.nest.pack_sequence_as(client_states, [a.stack() for a in arrays])


def data_spec(process: FederatedProcess) -> collections.OrderedDict:
  """One client's data spec (TF) of an ungrouped `process`."""
  return collections.OrderedDict(tff.types.type_to_tf_tensor_specs(process.data_type))


def grouped_process(process: FederatedProcess) -> FederatedProcess:
  """`process`'s round with groups of clients as its CLIENTS values (module docstring).

  Its data are groups (`pack_groups`), its client states stacked (`stack_states`); the
  same state and results as `process`. Raises `GroupingError` with a `model_aggregator`.
  """
  if process.model_aggregator is not None:
    refuse_aggregator()
  spec = data_spec(process)
  work = functools.partial(group_work, process.client_work, spec, process.client_output_type)
  state_type = process.client_state_type
  if state_type is not None:
    work = lambda params, states, group, work=work: work(params, group, states)
    state_type = tff.types.tensorflow_to_type(
        stacked_spec(tff.types.type_to_tf_tensor_specs(state_type)))
  return process_lib.build_round(
      initial_params=process.initial_params, client_work=work,
      client_data_spec=group_spec(spec), server_optimizer=process.server_optimizer,
      weighting=process.weighting, client_state_type=state_type,
      initial_client_state=process.initial_client_state)
