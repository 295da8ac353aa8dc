"""Turns protocol clients into the per-round arrays a process consumes.

All randomness is seeded by (seed, round[, client]), so a resumed run samples
exactly the clients and orders the data exactly as the uninterrupted run did.
"""

from __future__ import annotations

import collections
from typing import List, Sequence

import numpy as np

from tff_meta.data import protocol
from tff_meta.data.protocol import ClientSplit


def sample_clients(num_clients: int, clients_per_round: int, seed: int, round_num: int) -> np.ndarray:
  """`clients_per_round` of `num_clients` indices, uniformly without replacement (FedMeta
  Appendix A.2). More than there are is a ValueError, never a silent cap: a run asking for
  more clients than the data has is refused where its settings are checked."""
  if not 1 <= clients_per_round <= num_clients:
    raise ValueError(f'cannot sample {clients_per_round} of {num_clients} clients per round; '
                     f'ask for 1 to {num_clients}.')
  return np.random.default_rng([seed, round_num]).choice(num_clients, size=clients_per_round,
                                                         replace=False)


def episode(client: ClientSplit) -> collections.OrderedDict:
  support, query, _ = client.parts()   # one read of a client read on demand
  return collections.OrderedDict(
      support_x=support.x, support_y=support.y, query_x=query.x, query_y=query.y)


def full(client: ClientSplit, seed: int, round_num: int) -> collections.OrderedDict:
  """All of a training client's data, shuffled per round (FedAvg's local data)."""
  arrays = client.all
  order = np.random.default_rng([seed, round_num, len(arrays)]).permutation(len(arrays))
  return collections.OrderedDict(x=arrays.x[order], y=arrays.y[order])


def round_data(kind: str, clients: Sequence[ClientSplit], seed: int, round_num: int,
               resample: bool = False) -> List:
  """The round's data of the sampled training `clients`, as `kind` ('episode' or 'full').

  `resample` draws each client's support/query split afresh for this round
  (`protocol.resample_split`, FedMeta Algorithm 1 line 13); 'full' data are
  all of a client's training data either way.
  """
  if kind == 'episode':
    if resample:
      clients = [protocol.resample_split(c, seed, round_num) for c in clients]
    return [episode(c) for c in clients]
  if kind == 'full':
    return [full(c, seed, round_num) for c in clients]
  raise ValueError(f'Unknown training data kind {kind!r}.')
