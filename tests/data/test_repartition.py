"""FEMNIST writers pooled and re-split into label shards (FedEC's FEMNIST (150, 3) partition).

The fixture holds 12 writers' 120 digit images (tests/fixtures/README.md), so the
partition is run with 20 clients of 3 labels each instead of 150.
"""

import numpy as np
import pytest

from tests.conftest import FIXTURES
from tff_meta.data import load_dataset
from tff_meta.data.types import DataError


def test_femnist_writers_become_clients_with_3_classes_each():
  ds = load_dataset('emnist_label_shards', cache_dir=f'{FIXTURES}/tff', num_clients=20,
                    labels_per_client=3)
  pooled = load_dataset('emnist', cache_dir=f'{FIXTURES}/tff', only_digits=True)
  assert len(ds.clients) == 20 and ds.num_classes == 10
  assert all(len(np.unique(a.y)) == 3 for a in ds.clients.values())
  assert sum(len(a) for a in ds.clients.values()) == sum(len(a) for a in pooled.clients.values())
  # Inverted: ink = 1 on a 0 background (the file stores 1.0 = background).
  total = sum(float(a.x.sum()) for a in ds.clients.values())
  pixels = sum(a.x.size for a in pooled.clients.values())
  assert total == pytest.approx(pixels - sum(float(a.x.sum()) for a in pooled.clients.values()),
                                rel=1e-5)
  assert np.mean([a.x.mean() for a in ds.clients.values()]) < 0.2


def test_unknown_source_is_named():
  with pytest.raises(DataError, match="Cannot re-partition 'digits'"):
    load_dataset('emnist_label_shards', source='digits')
