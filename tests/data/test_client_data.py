"""Client sampling: seeded, without replacement, and never silently capped."""

import numpy as np
import pytest

from tff_meta.data import client_data


def test_sampling_is_seeded_and_without_replacement():
  a = client_data.sample_clients(50, 7, seed=3, round_num=5)
  np.testing.assert_array_equal(a, client_data.sample_clients(50, 7, seed=3, round_num=5))
  assert len(set(a.tolist())) == 7 and a.min() >= 0 and a.max() < 50
  assert not np.array_equal(a, client_data.sample_clients(50, 7, seed=3, round_num=6))


def test_all_clients_is_a_permutation():
  assert sorted(client_data.sample_clients(9, 9, seed=0, round_num=1).tolist()) == list(range(9))


@pytest.mark.parametrize('asked', [0, 10])
def test_a_request_the_clients_cannot_meet_is_refused(asked):
  with pytest.raises(ValueError, match=f'cannot sample {asked} of 9 clients'):
    client_data.sample_clients(9, asked, seed=0, round_num=1)


def _client(client_id, num_support, num_query):
  from tff_meta.data.protocol import ClientSplit
  from tff_meta.data.types import ClientArrays
  rows = np.arange(num_support + num_query)
  arrays = lambda r: ClientArrays(np.stack([r, r], axis=1).astype(np.float32), r.astype(np.int32))
  return ClientSplit(client_id, arrays(rows[:num_support]), arrays(rows[num_support:]))


@pytest.mark.parametrize('kind', ['episode', 'full'])
def test_a_cap_keeps_distinct_examples_of_the_client_drawn_by_seed_and_round(kind):
  clients = [_client('a', 40, 160), _client('b', 2, 8)]
  capped = client_data.round_data(kind, clients, seed=1, round_num=3, max_examples=50)
  again = client_data.round_data(kind, clients, seed=1, round_num=3, max_examples=50)
  later = client_data.round_data(kind, clients, seed=1, round_num=4, max_examples=50)
  big, small = capped
  ys = [k for k in big if k.endswith('y')]
  assert sum(len(big[k]) for k in ys) == 50
  if kind == 'episode':   # the support fraction holds: 40 / 200 of 50
    assert (len(big['support_y']), len(big['query_y'])) == (10, 40)
    assert set(big['support_y']) <= set(range(40)) and set(big['query_y']) <= set(range(40, 200))
  for k in ys:
    assert len(set(big[k].tolist())) == len(big[k])            # without replacement
    np.testing.assert_array_equal(big[k], big[k[:-1] + 'x'][:, 0])   # rows stay paired
    np.testing.assert_array_equal(big[k], again[0][k])          # seeded
  assert any(not np.array_equal(big[k], later[0][k]) for k in ys)   # drawn afresh each round
  uncapped = client_data.round_data(kind, clients, seed=1, round_num=3)
  for k in small:   # a client under the cap is unchanged
    np.testing.assert_array_equal(small[k], uncapped[1][k])


def test_a_cap_keeps_one_support_example_of_a_small_fraction():
  data = client_data.round_data('episode', [_client('a', 1, 99)], seed=0, round_num=1,
                                max_examples=10)[0]
  assert (len(data['support_y']), len(data['query_y'])) == (1, 9)
