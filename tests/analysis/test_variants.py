"""The variant labels shared by the report programs (tff_meta/analysis/variants.py)."""

from tff_meta.analysis import variants


def test_only_the_keys_that_differ_name_a_variant():
  flats = [{'lr': 0.1, 'steps': 1, 'name': 'a'}, {'lr': 0.3, 'steps': 1, 'name': 'a'}]
  assert variants.variant_labels(flats) == ['lr=0.1', 'lr=0.3']


def test_identical_configs_share_the_empty_label():
  assert variants.variant_labels([{'lr': 0.1}, {'lr': 0.1}]) == ['', '']
  assert variants.variant_labels([]) == []


def test_a_missing_key_shows_its_stand_in_and_only_differs_if_the_value_does():
  flats = [{'lr': 0.1, 'steps': 5}, {'lr': 0.1}]
  assert variants.variant_labels(flats) == ['steps=5', 'steps=(absent)']
  # with the default filled in, a config that omits the key is the same variant
  assert variants.variant_labels(flats, missing={'steps': 5}.get) == ['', '']


def test_values_compare_by_repr_and_names_can_be_shortened():
  flats = [{'hparams.lr': [1, 2]}, {'hparams.lr': [1, 3]}, {'hparams.lr': [1, 2]}]
  labels = variants.variant_labels(flats, name=lambda k: k.removeprefix('hparams.'))
  assert labels == ['lr=[1, 2]', 'lr=[1, 3]', 'lr=[1, 2]']
  assert variants.variant_labels([{'x': 1}, {'x': 1.0}]) == ['x=1', 'x=1.0']


def test_labelled_and_repeated():
  assert variants.labelled('MAML', '') == 'MAML'
  assert variants.labelled('MAML', 'lr=0.1') == 'MAML [lr=0.1]'
  assert variants.repeated([2, 0, 2, 1, 0]) == [0, 2]
  assert variants.repeated([0, 1]) == []
