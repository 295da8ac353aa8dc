"""docs/ADDING_AN_ALGORITHM.md's claim: one registry entry is all the project needs.

A throwaway algorithm (FedProx's client work under a new name, with its own
hparams dataclass and `validate()`) is registered the way an algorithm module
does it; the registry then builds it, its process trains, its FLOPs are
counted, its hparams are read from a config-like mapping, and the catalog
lists it.
"""

import collections
import dataclasses

import numpy as np
import pytest

from tests import helpers
from tff_meta import catalog
from tff_meta.algorithms import ALGORITHMS, base, fedprox, readers
from tff_meta.core.registry import Registry

NAME = '_added_fedprox'


@dataclasses.dataclass(frozen=True)
class AddedHparams(fedprox.FedProxHparams):
  """FedProx's fields; this algorithm also refuses mu = 0 (that would be FedAvg)."""

  def validate(self) -> None:
    super().validate()
    if self.prox_mu == 0:
      raise ValueError('the added algorithm needs prox_mu > 0.')


ENTRY = base.AlgorithmEntry(
    NAME, 'Added FedProx', AddedHparams, fedprox._build,  # pylint: disable=protected-access
    description='an algorithm added by one entry', source='test',
    round_flops=fedprox.round_flops)


@pytest.fixture(scope='module')
def registered():
  base.register(ENTRY)
  try:
    yield ALGORITHMS.get(NAME)
  finally:   # the other tests see the registry as the modules define it
    ALGORITHMS.remove(NAME)


@pytest.mark.slow
def test_the_registry_builds_and_the_process_trains(tff_context, registered):
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  alg = registered(model, {'prox_mu': 0.1, 'client_lr': 0.1, 'local_epochs': 1,
                           'batch_size': 5})
  assert (alg.name, alg.display_name) == (NAME, 'Added FedProx')
  clients = [collections.OrderedDict(x=c.all.x, y=c.all.y) for c in data.train[:2]]
  state = alg.process.initialize()
  before = [np.array(w) for w in alg.params(state)['weights']]
  state, metrics = alg.process.next(state, clients)
  after = alg.params(state)['weights']
  assert metrics['num_rejected'] == 0
  assert any(not np.allclose(a, b) for a, b in zip(after, before))
  assert alg.client_flops(clients[0]) > 0


@pytest.mark.slow
def test_it_runs_through_the_execution_plan_without_naming_it(tff_context, registered):
  """The module passed nothing about execution; the default plan (`runtime.execution_plan`)
  runs its rounds (2 clients grouped into one call unless its Adam steps in place) with
  `process.next`'s results."""
  import types   # pylint: disable=g-import-not-at-top
  import tensorflow as tf   # pylint: disable=g-import-not-at-top
  from tff_meta.runtime.execution_plan import ExecutionPlan   # pylint: disable=g-import-not-at-top
  from tff_meta.runtime.grouped_rounds import GroupedRounds   # pylint: disable=g-import-not-at-top
  data, model = helpers.digits_protocol(), helpers.mlp_spec()
  for optimizer in ('sgd', 'adam'):
    alg = registered(model, {'prox_mu': 0.1, 'client_lr': 0.1, 'local_epochs': 1,
                             'batch_size': 5, 'client_optimizer': optimizer})
    clients = [collections.OrderedDict(x=c.all.x, y=c.all.y) for c in data.train[:2]]
    pool = types.SimpleNamespace(addresses=[f'localhost:{tff_context.port}'])
    runner = ExecutionPlan().runner(alg, pool, num_clients=2, round_batch=lambda r: clients,
                                    needs_state=lambda r: True)
    assert isinstance(runner, GroupedRounds) == (optimizer == 'sgd'), (optimizer, runner)
    state = expected = alg.process.initialize()
    with runner:
      for r in (1, 2):
        state = runner.next(state, r, clients).state
        expected, _ = alg.process.next(expected, clients)
    for a, b in zip(tf.nest.flatten(state), tf.nest.flatten(expected)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_its_hparams_are_checked_by_its_own_dataclass(registered):
  with pytest.raises(ValueError, match='needs prox_mu > 0'):
    registered(helpers.mlp_spec(), {'prox_mu': 0.0})
  with pytest.raises(ValueError, match='has no hparam inner_lr'):
    registered.make_hparams({'inner_lr': 0.1})
  assert NAME in readers('prox_mu')
  assert NAME not in readers('inner_lr')


def test_the_catalog_lists_it_from_its_entry(registered):
  public = Registry('algorithm')
  public.add('added_fedprox', registered)
  assert catalog.rows({'algorithm': public}) == [
      ('algorithm', 'added_fedprox', 'an algorithm added by one entry', 'test')]
  assert all(name != NAME for _, name, _, _ in catalog.rows())   # private names stay out
