"""Rounds with several clients per TFF call, behind the one round interface.

`GroupedRounds` wraps any `RoundRunner` built on a process's grouped twin
(`grouped.grouped_process(process)`, `runtime/grouped.py`): it packs the round's clients
into groups of at most `clients_per_call` (`grouped.pack_groups`), stacks
their states, hands the groups to the inner runner, and unstacks the new
states, so the training loop still passes one value per client and gets one
state per client back. The results are those of `process.next` up to the
order of float additions (`tests/runtime/test_grouped_rounds.py`). An inner
runner that keeps client data on the worker (`ResidentRounds` with a
`resident_data.DataPool`) gets each group's clients unpacked instead.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence


from tff_meta.runtime import grouped
from tff_meta.runtime.rounds import RoundResult, RoundRunner


def num_groups(num_clients: int, clients_per_call: int) -> int:
  return len(grouped.group_sizes(num_clients, clients_per_call))


def group_batches(process, clients_per_call: int,
                  round_batch: Callable[[int], Sequence]) -> Callable[[int], list]:
  """`round_batch` (round -> clients of `process`) as round -> groups, for an inner runner."""
  spec = grouped.data_spec(process)
  return lambda r: grouped.pack_groups(round_batch(r), spec, clients_per_call)


class GroupedRounds(RoundRunner):
  """`inner` (a runner of the grouped twin for `num_groups` values) fed with groups."""

  def __init__(self, process, inner: RoundRunner, clients_per_call: int):
    self._spec = grouped.data_spec(process)
    self._inner = inner
    self.clients_per_call = clients_per_call

  def groups(self, batch: Sequence):
    """The round's groups as the inner runner takes them: packed, or each group's clients."""
    if getattr(self._inner, 'takes_client_groups', False):
      return grouped.split_groups(batch, self.clients_per_call)
    return grouped.pack_groups(batch, self._spec, self.clients_per_call)

  def next(self, state, round_num: int, batch: Sequence,
           client_states: Optional[Sequence] = None) -> RoundResult:
    states = (None if client_states is None
              else grouped.stack_states(client_states, self.clients_per_call))
    result = self._inner.next(state, round_num, self.groups(batch), states)
    if result.client_states is not None:
      result = result._replace(client_states=grouped.unstack_states(result.client_states))
    return result

  def close(self) -> None:
    self._inner.close()
