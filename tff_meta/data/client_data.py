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


def capped(arrays: collections.OrderedDict, max_examples: int,
           rng: np.random.Generator) -> collections.OrderedDict:
  """At most `max_examples` of one client's round data, drawn without replacement by `rng`.

  'full' data (x, y) keep `max_examples` rows; an episode keeps its support
  and query sets in their proportion (support round(max * |S| / n), at least
  one of each while both are non-empty), so the support fraction p holds. A
  client with no more than `max_examples` is returned unchanged.
  """
  prefixes = [k[:-1] for k in arrays if k.endswith('y')]   # '' (full) or 'support_', 'query_'
  sizes = [len(arrays[p + 'y']) for p in prefixes]
  total = sum(sizes)
  if max_examples <= 0 or total <= max_examples:
    return arrays
  keep = [max_examples]
  if len(sizes) == 2:
    first = min(max(int(round(max_examples * sizes[0] / total)), min(1, sizes[0])),
                sizes[0], max_examples - min(1, sizes[1]))
    keep = [first, max_examples - first]
  out = collections.OrderedDict()
  for p, n, k in zip(prefixes, sizes, keep):
    rows = rng.permutation(n)[:k]
    out[p + 'x'], out[p + 'y'] = arrays[p + 'x'][rows], arrays[p + 'y'][rows]
  return out


def round_data(kind: str, clients: Sequence[ClientSplit], seed: int, round_num: int,
               resample: bool = False, max_examples: int = 0) -> List:
  """The round's data of the sampled training `clients`, as `kind` ('episode' or 'full').

  `resample` draws each client's support/query split afresh for this round
  (`protocol.resample_split`, FedMeta Algorithm 1 line 13); 'full' data are
  all of a client's training data either way. `max_examples` > 0 keeps at
  most that many of each client's examples this round (`capped`), drawn by
  (seed, client, round), so a resumed run draws what the uninterrupted one did.
  """
  if kind == 'episode':
    if resample:
      clients = [protocol.resample_split(c, seed, round_num) for c in clients]
    data = [episode(c) for c in clients]
  elif kind == 'full':
    data = [full(c, seed, round_num) for c in clients]
  else:
    raise ValueError(f'Unknown training data kind {kind!r}.')
  if max_examples <= 0:
    return data
  return [capped(d, max_examples, np.random.default_rng(
      [protocol.client_seed(seed, c.client_id), int(round_num), 1])) for d, c in zip(data, clients)]
