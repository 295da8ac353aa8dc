"""The k-round computation's type signature and input format (issue #8, rounds_per_call).

That it equals k calls to `process.next` is checked through the runner that
calls it (tests/runtime/test_chunked.py).
"""

import pytest
import tensorflow_federated as tff

from tests import helpers
from tff_meta.algorithms import multi_round


def test_multi_round_type_signature():
  proc, _ = helpers.fedmeta_rounds('metasgd', 3)
  sig = multi_round.build_multi_round_next(proc, 2).type_signature
  assert sig.parameter[1].member == tff.StructType([proc.data_type] * 2)
  assert sig.result[0] == proc.state_type
  assert len(sig.result[1].member) == 2


def test_bad_input_is_named():
  with pytest.raises(ValueError, match='lacks'):
    multi_round.build_multi_round_next(object(), 2)
  with pytest.raises(ValueError, match='same number of clients'):
    multi_round.stack_rounds([[1, 2], [1]])
  assert multi_round.stack_rounds([[1, 2], [3, 4]]) == [(1, 3), (2, 4)]
