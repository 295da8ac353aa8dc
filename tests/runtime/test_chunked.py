"""k rounds in one TFF call equal k calls to `process.next` (issue #8, rounds_per_call), and
`ChunkedRounds` cuts the calls at the rounds that need the state."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import fedavg, fedmeta
from tff_meta.program import client_data
from tff_meta.runtime import chunked as chunked_lib


@pytest.fixture(scope='module')
def setup():
  return helpers.digits_protocol(), helpers.mlp_spec()


def _batches(data, kind, rounds, clients=3, seed=0):
  out = []
  for r in rounds:
    idx = client_data.sample_clients(len(data.train), clients, seed, r)
    out.append(client_data.round_data(kind, [data.train[i] for i in idx], seed, r))
  return out


def _assert_states_close(a, b):
  for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def _processes(model):
  adam = tff.learning.optimizers.build_adam(learning_rate=0.01)
  return {
      'metasgd_adam': (fedmeta.build_fedmeta_process(
          model, variant='metasgd', inner_lr=0.1, inner_steps=1, server_optimizer=adam),
                       'episode'),
      'fedavg_sgd': (fedavg.build_fedavg_process(
          model, client_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
          local_epochs=1, batch_size=8,
          server_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=1.0)), 'full'),
  }


@pytest.mark.slow
@pytest.mark.parametrize('name', ['metasgd_adam', 'fedavg_sgd'])
def test_three_rounds_in_one_call_equal_three_single_rounds(tff_context, setup, name):
  data, model = setup
  proc, kind = _processes(model)[name]
  batches = _batches(data, kind, [1, 2, 3])
  state = single = proc.initialize()
  singles = []
  for b in batches:
    single, m = proc.next(single, b)
    singles.append(m)
  runner = chunked_lib.MultiRoundCalls(proc, rounds_per_call=3)
  multi, metrics = runner.run(state, batches)
  assert int(multi['round_num']) == 3
  _assert_states_close(multi, single)
  assert len(metrics) == 3
  for m, s in zip(metrics, singles):
    assert set(m) == set(s)
    for key in s:
      np.testing.assert_allclose(m[key], s[key], rtol=1e-5)
  # The call changed the state: the comparison is not vacuous.
  assert not np.allclose(multi['params']['weights'][0], state['params']['weights'][0])


def test_chunks_end_on_evaluation_and_checkpoint_rounds():
  stop = lambda r: r % 10 == 0 or r % 5 == 0 or r >= 22
  ends, done = [], 0
  while done < 24:
    done = chunked_lib.chunk_end(done, 4, stop)
    ends.append(done)
  assert ends == [4, 5, 9, 10, 14, 15, 19, 20, 22, 23, 24]
  assert chunked_lib.chunk_end(7, 1, stop) == 8


@pytest.mark.slow
def test_chunked_rounds_give_each_round_its_metrics_and_state_at_stops(tff_context, setup):
  data, model = setup
  proc, kind = _processes(model)['fedavg_sgd']
  batches = {r: b for r, b in zip(range(1, 6), _batches(data, kind, range(1, 6)))}
  calls = []
  chunked = chunked_lib.ChunkedRounds(proc, 3, lambda r: calls.append(r) or batches[r],
                                      needs_state=lambda r: r == 2)
  state = single = proc.initialize()
  for r in range(1, 6):
    single, expected = proc.next(single, batches[r])
    state, metrics, _ = chunked.next(state, r, batches[r])
    np.testing.assert_allclose(metrics['loss_sum'], expected['loss_sum'], rtol=1e-5)
    if r in (2, 5):   # the ends of the calls [1, 2] and [3, 4, 5]
      assert int(state['round_num']) == r
      _assert_states_close(state, single)
    else:
      assert int(state['round_num']) == (0 if r == 1 else 2)
  # The first round of a call runs on the batch given; the call reads its later rounds ahead.
  assert calls == [2, 4, 5]


def test_bad_input_is_named():
  with pytest.raises(ValueError, match='rounds_per_call must be >= 1'):
    chunked_lib.MultiRoundCalls(object(), 0)
