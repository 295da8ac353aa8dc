"""FedMeta MAML / FOMAML / Meta-SGD against plain-TF references (FedMeta Alg. 1)."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import fedmeta
from tff_meta.learning import inner_loop, losses

ALPHA = 0.5


@pytest.fixture(scope='module')
def setup():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  clients = [helpers.episode(c) for c in data.train[:3]]
  return model, clients


def _sgd_process(model, variant, steps=1):
  return fedmeta.build_fedmeta_process(
      model, variant=variant, inner_lr=ALPHA, inner_steps=steps,
      server_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=1.0))


@pytest.mark.parametrize('steps', [1, 2])
def test_maml_client_meta_gradient_matches_plain_tf(tff_context, setup, steps):
  model, clients = setup
  proc = _sgd_process(model, 'maml', steps)
  params = proc.initialize()['params']
  out = proc.client_update(params, clients[0])
  expected, _ = helpers.reference_meta_gradient(model.initial_trainable, clients[0], ALPHA, steps)
  helpers.assert_rel_close(out['weighted_update']['weights'], expected, rtol=1e-5)
  assert out['weight'] == 1.0 and out['num_rejected'] == 0.0


def test_maml_round_applies_mean_meta_gradient(tff_context, setup):
  model, clients = setup
  proc = _sgd_process(model, 'maml')
  state = proc.initialize()
  new_state, metrics = proc.next(state, clients)
  refs = [helpers.reference_meta_gradient(model.initial_trainable, c, ALPHA)[0] for c in clients]
  mean = [np.mean([r[i] for r in refs], axis=0) for i in range(len(refs[0]))]
  for old, new, g in zip(state['params']['weights'], new_state['params']['weights'], mean):
    np.testing.assert_allclose(new, old - g, atol=2e-6)
  assert metrics['num_clients'] == 3 and new_state['round_num'] == 1
  assert metrics['num_examples'] == sum(len(c['query_y']) for c in clients)


def test_fomaml_is_first_order_and_differs_from_maml(tff_context, setup):
  model, clients = setup
  maml = _sgd_process(model, 'maml')
  fo = _sgd_process(model, 'fomaml')
  params = maml.initialize()['params']
  g_maml = maml.client_update(params, clients[0])['weighted_update']['weights']
  g_fo = fo.client_update(params, clients[0])['weighted_update']['weights']
  expected_fo, _ = helpers.reference_meta_gradient(
      model.initial_trainable, clients[0], ALPHA, first_order=True)
  helpers.assert_rel_close(g_fo, expected_fo, rtol=1e-5)
  diff = max(np.max(np.abs(a - b)) for a, b in zip(g_maml, g_fo))
  scale = max(np.max(np.abs(a)) for a in g_maml)
  assert diff > 1e-3 * scale, 'FOMAML should differ from second-order MAML'


def test_metasgd_learns_rates_and_matches_reference(tff_context, setup):
  model, clients = setup
  proc = _sgd_process(model, 'metasgd')
  state = proc.initialize()
  rates = state['params']['rates']
  assert all(np.allclose(r, ALPHA) for r in rates)
  out = proc.client_update(state['params'], clients[0])
  gw, ga = helpers.reference_meta_gradient(
      model.initial_trainable, clients[0], ALPHA, rates=rates)
  helpers.assert_rel_close(out['weighted_update']['weights'], gw, rtol=1e-5)
  helpers.assert_rel_close(out['weighted_update']['rates'], ga, rtol=1e-5)
  new_state, _ = proc.next(state, clients[:1])
  changed = [not np.allclose(a, b) for a, b in zip(rates, new_state['params']['rates'])]
  assert all(changed), 'Meta-SGD must update alpha'


def test_type_signatures(setup):
  model, _ = setup
  proc = _sgd_process(model, 'metasgd')
  init_type = proc.initialize.type_signature
  assert init_type.parameter is None
  assert init_type.result.placement == tff.SERVER
  state_type = init_type.result.member
  assert [n for n, _ in tff.structure.iter_elements(state_type)] == [
      'params', 'optimizer_state', 'round_num']
  assert [n for n, _ in tff.structure.iter_elements(state_type.params)] == ['weights', 'rates']
  next_type = proc.next.type_signature
  state_param, data_param = next_type.parameter
  assert state_param == init_type.result
  assert data_param.placement == tff.CLIENTS and not data_param.all_equal
  assert [n for n, _ in tff.structure.iter_elements(data_param.member)] == [
      'support_x', 'support_y', 'query_x', 'query_y']
  assert str(data_param.member.support_x) == 'float32[?,8,8]'
  new_state, metrics = next_type.result
  assert new_state == init_type.result and metrics.placement == tff.SERVER


def test_non_finite_update_is_rejected_and_state_kept(tff_context, setup):
  model, clients = setup
  proc = _sgd_process(model, 'maml')
  state = proc.initialize()
  bad = collections.OrderedDict(clients[1])
  bad['support_x'] = np.full_like(bad['support_x'], np.nan)
  only_bad, m_bad = proc.next(state, [bad])
  assert m_bad['num_rejected'] == 1
  for a, b in zip(state['params']['weights'], only_bad['params']['weights']):
    np.testing.assert_array_equal(a, b)
  mixed, m_mixed = proc.next(state, [clients[0], bad])
  good, _ = proc.next(state, [clients[0]])
  assert m_mixed['num_rejected'] == 1 and np.isfinite(m_mixed['loss_sum'])
  for a, b in zip(good['params']['weights'], mixed['params']['weights']):
    np.testing.assert_allclose(a, b, atol=1e-7)


def test_empty_support_set_is_rejected_not_propagated(tff_context, setup):
  model, clients = setup
  proc = _sgd_process(model, 'maml')
  state = proc.initialize()
  empty = collections.OrderedDict(clients[1])
  empty['support_x'] = empty['support_x'][:0]
  empty['support_y'] = empty['support_y'][:0]
  new_state, metrics = proc.next(state, [clients[0], empty])
  assert metrics['num_rejected'] == 1
  assert all(np.all(np.isfinite(w)) for w in new_state['params']['weights'])


def test_unknown_variant_and_bad_steps(setup):
  model, _ = setup
  opt = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  with pytest.raises(ValueError, match='Unknown FedMeta variant'):
    fedmeta.build_fedmeta_process(model, variant='reptile', inner_lr=0.1, inner_steps=1,
                                  server_optimizer=opt)
  with pytest.raises(ValueError, match='inner_steps'):
    fedmeta.build_fedmeta_process(model, variant='maml', inner_lr=0.1, inner_steps=0,
                                  server_optimizer=opt)


class _TinyModel:
  """A plain-TF two-layer model: `logits(weights, x)` as `ModelSpec` has it."""

  @staticmethod
  def logits(w, x):
    return tf.matmul(tf.tanh(tf.matmul(x, w[0]) + w[1]), w[2])


def _tiny_episode(num_support, num_query, seed=0, d=4, k=3):
  rng = np.random.default_rng(seed)
  data = collections.OrderedDict(
      support_x=rng.normal(size=(num_support, d)), support_y=rng.integers(0, k, num_support),
      query_x=rng.normal(size=(num_query, d)), query_y=rng.integers(0, k, num_query))
  data = collections.OrderedDict(
      (key, tf.constant(v, tf.int32 if key.endswith('_y') else tf.float32))
      for key, v in data.items())
  weights = [tf.constant(rng.normal(size=s) * 0.7, tf.float32) for s in ((d, 5), (5,), (5, k))]
  return data, weights


# support 7 / query 10 rows in slices of 3 (neither divisible); 2 / 2, less than one slice.
@pytest.mark.parametrize('num_support,num_query', [(7, 10), (2, 2)])
@pytest.mark.parametrize('variant,steps', [('maml', 1), ('maml', 2), ('fomaml', 1),
                                           ('metasgd', 2)])
def test_sliced_meta_gradient_equals_the_full_batch_one(variant, steps, num_support, num_query):
  data, weights = _tiny_episode(num_support, num_query)
  params = collections.OrderedDict(weights=weights)
  if variant == 'metasgd':
    params['rates'] = [tf.fill(w.shape, 0.3) + 0.1 * tf.tanh(w) for w in weights]
  kw = dict(inner_lr=ALPHA, inner_steps=steps, first_order=variant == 'fomaml')
  want, logits = fedmeta.meta_gradient(_TinyModel, params, data, **kw)
  got, stats = fedmeta.sliced_meta_gradient(_TinyModel, params, data, size=3, **kw)
  for key in params:
    helpers.assert_rel_close(got[key], want[key], rtol=2e-5)
  want_stats = losses.batch_stats(logits, data['query_y'])
  assert float(stats['correct']) == float(want_stats['correct'])
  assert float(stats['num_examples']) == num_query
  np.testing.assert_allclose(float(stats['loss_sum']), float(want_stats['loss_sum']), rtol=1e-6)


def test_sliced_meta_gradient_keeps_the_second_order_term():
  """The check can tell MAML from FOMAML (the Hessian-vector product is not lost)."""
  data, weights = _tiny_episode(7, 10, seed=1)
  params = collections.OrderedDict(weights=weights)
  maml, _ = fedmeta.sliced_meta_gradient(_TinyModel, params, data, inner_lr=ALPHA,
                                         inner_steps=1, first_order=False, size=3)
  fo, _ = fedmeta.sliced_meta_gradient(_TinyModel, params, data, inner_lr=ALPHA,
                                       inner_steps=1, first_order=True, size=3)
  assert max(float(tf.reduce_max(tf.abs(a - b))) for a, b in
             zip(maml['weights'], fo['weights'])) > 1e-3


def test_process_takes_the_sliced_path_past_slice_above(tff_context, setup, monkeypatch):
  """Clients past `slice_above` (1: every client) in slices of 7: the TFF client work
  gives the plain-TF full-batch meta-gradient (Meta-SGD's is checked in plain TF above)."""
  model, clients = setup
  monkeypatch.setattr(inner_loop, 'SLICE_SIZE', 7)   # read when the work is built
  assert len(clients[0]['support_y']) % 7 and len(clients[0]['query_y']) % 7
  proc = fedmeta.build_fedmeta_process(
      model, variant='maml', inner_lr=ALPHA, inner_steps=2, slice_above=1,
      server_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=1.0))
  out = proc.client_update(proc.initialize()['params'], clients[0])
  expected, _ = helpers.reference_meta_gradient(model.initial_trainable, clients[0], ALPHA, 2)
  helpers.assert_rel_close(out['weighted_update']['weights'], expected, rtol=2e-5)
  assert out['weight'] == 1.0 and out['num_rejected'] == 0.0
