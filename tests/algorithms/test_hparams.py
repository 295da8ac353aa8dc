"""Per-algorithm hparams dataclasses, their union (a config's [hparams]) and the entries."""

import dataclasses

import pytest

from tests import helpers
from tff_meta.algorithms import ALGORITHMS, Hparams, fedavg, hparams, scaffold
from tff_meta.core.fields import check_fields


def test_every_algorithm_has_a_frozen_hparams_dataclass_with_help():
  for name in ALGORITHMS:
    cls = ALGORITHMS.get(name).hparams
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, name
    for field in dataclasses.fields(cls):
      assert hparams.help_of(field), f'{name}: hparam {field.name} has no help text'
    assert ALGORITHMS.get(name).description, name


def test_the_union_holds_each_algorithms_defaults():
  table = Hparams()
  for name in ALGORITHMS:
    own = ALGORITHMS.get(name).hparams()
    for field in dataclasses.fields(own):
      assert getattr(table, field.name) == getattr(own, field.name), (name, field.name)


def test_a_name_must_mean_one_thing():
  @dataclasses.dataclass(frozen=True)
  class Other(hparams.Base):
    batch_size: int = hparams.field(32, 'Another batch size.')

  with pytest.raises(TypeError, match="hparam 'batch_size' of Other differs"):
    hparams.table([fedavg.FedAvgHparams, Other])


def test_entry_takes_its_own_fields_from_a_table_or_mapping():
  entry = ALGORITHMS.get('fedavg')
  hp = entry.make_hparams(Hparams(client_lr=0.5, inner_lr=0.7))   # inner_lr: not FedAvg's
  assert hp == fedavg.FedAvgHparams(client_lr=0.5)
  assert entry.make_hparams({'batch_size': 3}).batch_size == 3
  with pytest.raises(ValueError, match='FedAvgHparams has no hparam inner_lr; known: .*client_lr'):
    entry.make_hparams({'inner_lr': 0.1})


def test_check_fields_names_the_field_and_its_range():
  with pytest.raises(ValueError, match=r'hparams.batch_size must be >= 1, got 0'):
    check_fields(fedavg.FedAvgHparams(batch_size=0), ValueError, prefix='hparams.')
  with pytest.raises(ValueError, match=r"hparams.weighting must be one of '', uniform, "
                                       r"num_examples, got 'size'"):
    check_fields(fedavg.FedAvgHparams(weighting='size'), ValueError, prefix='hparams.')
  with pytest.raises(ValueError, match='hparams.client_lr must be a finite number'):
    check_fields(fedavg.FedAvgHparams(client_lr=float('nan')), ValueError, prefix='hparams.')
  check_fields(Hparams(), ValueError)   # the defaults are in range


def test_scaffold_fills_n_and_s_from_the_run():
  hp = scaffold.ScaffoldHparams().for_run(num_train_clients=30, clients_per_round=4)
  assert (hp.population, hp.sampled_clients) == (30, 4)
  hp = scaffold.ScaffoldHparams(population=3).for_run(num_train_clients=30, clients_per_round=4)
  assert (hp.population, hp.sampled_clients) == (3, 3)
  hp = fedavg.FedAvgHparams()
  assert hp.for_run(num_train_clients=30, clients_per_round=4) is hp


def test_entry_names_the_algorithm_it_builds():
  alg = ALGORITHMS.get('fedavg_meta')(helpers.mlp_spec(), {'finetune_epochs': 2})
  assert (alg.name, alg.display_name, alg.train_data) == ('fedavg_meta', 'FedAvg(Meta)', 'full')
