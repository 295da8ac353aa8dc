"""research.fewround_diagnostics: the embedding statistics, against hand computation."""

import types

import numpy as np
import pytest

from research import fewround_diagnostics as diagnostics
from tff_meta.fewround.model import CLASSIFIERS


def test_spread_separation_and_loss_match_hand_computation():
  # one client, 2 classes, 2 support examples each; the "embedding" returns x itself
  x = np.array([[0., 0.], [0., 1.], [1., 0.], [1., 1.]], np.float32)
  client = {'support_x': x, 'support_y': np.array([0, 0, 1, 1], np.int32)}
  model = types.SimpleNamespace(ways=3, classifier=CLASSIFIERS.get('distance'))   # slot 3 absent: ignored
  s = diagnostics.embedding_stats(model, [], [client], embed=lambda phi, images: images)
  # prototypes (0, .5) and (1, .5): between = 1; each example is .5 from its own: within = .25
  assert s['between'] == pytest.approx(1.0) and s['within'] == pytest.approx(0.25)
  assert s['ratio'] == pytest.approx(4.0)
  assert s['|f|'] == pytest.approx(np.mean([0.0, 1.0, 1.0, np.sqrt(2.0)]))
  # Eq. 2: softmax over -d^2 to the two prototypes: d^2 = .25 (own) and 1.25 (other)
  assert s['loss'] == pytest.approx(np.log1p(np.exp(-1.0)), rel=1e-5)


def test_one_example_per_class_has_no_ratio():
  client = {'support_x': np.array([[0., 0.], [3., 4.]], np.float32),
            'support_y': np.array([0, 1], np.int32)}
  model = types.SimpleNamespace(ways=2, classifier=CLASSIFIERS.get('distance'))
  s = diagnostics.embedding_stats(model, [], [client], embed=lambda phi, images: images)
  assert s['between'] == pytest.approx(25.0) and s['within'] == 0.0 and np.isnan(s['ratio'])


def test_a_learned_temperature_scales_the_loss_and_is_reported():
  x = np.array([[0., 0.], [0., 1.], [1., 0.], [1., 1.]], np.float32)
  client = {'support_x': x, 'support_y': np.array([0, 0, 1, 1], np.int32)}
  model = types.SimpleNamespace(ways=2, classifier=CLASSIFIERS.get('scaled_distance'),
                                num_backbone=0)
  phi = [np.float32(np.log(4.0))]   # t; tau = 4
  s = diagnostics.embedding_stats(model, phi, [client], embed=lambda phi, images: images)
  assert s['tau'] == pytest.approx(4.0) and s['between'] == pytest.approx(1.0)   # raw spread
  # tau * d^2 = 1 (own prototype) and 5 (the other)
  assert s['loss'] == pytest.approx(np.log1p(np.exp(-4.0)), rel=1e-5)


def test_read_phi_reads_a_saved_program_state(tmp_path):
  import asyncio  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  phi = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([7.0, 8.0], np.float32)]
  state = {'episode': np.int32(3), 'phi': phi, 'optimizer_state': {'step': np.int32(3)}}
  manager = tff.program.FileProgramStateManager(str(tmp_path))
  asyncio.run(manager.save(state, 50))
  got = diagnostics.read_phi(str(tmp_path / 'program_state_50'), 2)
  assert all(np.array_equal(a, b) for a, b in zip(got, phi))


@pytest.mark.slow
def test_graph_embed_runs_the_model_outside_tff():
  from tff_meta.fewround.model import build_few_round_model  # pylint: disable=g-import-not-at-top
  model = build_few_round_model('conv4', (28, 28), 'distance', 5, seed=0, pool_padding='same',
                                norm='group', groups=4)
  x = np.random.default_rng(0).random((3, 28, 28)).astype(np.float32)
  f = diagnostics.graph_embed(model)(model.initial_weights, x)
  assert f.shape == (3, model.feature_dim) and np.isfinite(f).all()
  # no coupling across the batch (group norm is per example): one example alone gives its row
  one = diagnostics.graph_embed(model)(model.initial_weights, x[1:2])
  np.testing.assert_allclose(one[0], f[1], rtol=1e-3, atol=1e-4)   # float-level (oneDNN)
