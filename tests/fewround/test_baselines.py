"""Tests for tff_meta.fewround.baselines: the methods' hparams and the context's shared rounds."""

import collections

import numpy as np
import pytest

from tests.fewround import fixtures
from tff_meta.fewround import baselines, config, tasks
from tff_meta.fewround import process as P


def test_personalization_never_uploads_global_prototypes_it_does_not_read():
  cfg = config.load(None, {'train_prototypes': 'recomputed', 'gamma': 0.5, 'rounds': 3})
  hp = baselines.personalization_hparams(cfg)
  assert (hp.train_prototypes, hp.rounds, hp.gamma, hp.local_adaptation) == (
      'previous', 0, 0.0, True)
  # The FRL methods keep the config's rule.
  assert cfg.hparams().train_prototypes == 'recomputed'


def _context():
  data = tasks.ClassSplitData('toy', np.zeros([6, *fixtures.SHAPE], np.float32),
                              np.arange(6, dtype=np.int32) % 3, collections.OrderedDict(
                                  train=np.arange(3), validation=np.array([]),
                                  test=np.array([])))
  return baselines.Context(config.load(None, {}), data)


@pytest.mark.slow
def test_round_computations_are_traced_once_per_model_structure_and_hparams(tff_context):
  ctx = _context()
  model = fixtures.tiny('linear')
  hp = P.FewRoundHparams(inner_lr=0.1, local_steps=2)
  shared = ctx.round_computations(model, hp)
  assert ctx.round_computations(model, P.FewRoundHparams(inner_lr=0.1, local_steps=2)) is shared
  # A head-replaced model (fine-tuning's candidates): same backbone and shapes, other weights.
  other = model.with_classifier('linear', fixtures.WAYS, [w + 0.5 for w in
                                                         model.initial_weights[:-2]], seed=3)
  assert ctx.round_computations(other, hp) is shared
  assert ctx.round_computations(model, P.FewRoundHparams(inner_lr=0.2, local_steps=2)) \
      is not shared
  assert ctx.round_computations(model.with_classifier('linear', fixtures.WAYS + 1), hp) \
      is not shared
  assert ctx.round_computations(fixtures.tiny('linear'), hp) is not shared   # its own backbone
  assert len(ctx.rounds) == 4
  # The shared trace reads the structure only: played on the other model's weights it gives
  # what that model's own computations give.
  clients = fixtures.clients()
  own = P.build_round(other, hp, P.data_spec(fixtures.SHAPE))
  (start, round_fn, evaluate), (own_start, own_round, own_evaluate) = shared, own
  got, _ = round_fn(start(other.initial_weights), clients)
  want, _ = own_round(own_start(other.initial_weights), clients)
  for a, b in zip([*got['theta'], got['protos']], [*want['theta'], want['protos']]):
    np.testing.assert_allclose(a, b, atol=1e-6)
  assert np.max(np.abs(got['theta'][-2] - other.initial_weights[-2])) > 1e-4   # it trained
  assert dict(evaluate(got, clients)) == dict(own_evaluate(want, clients))
