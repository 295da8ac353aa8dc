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
