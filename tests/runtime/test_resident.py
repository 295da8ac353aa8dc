"""The server state resident on the worker gives the rounds of `process.next` (issue #8)."""

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tff_meta.runtime.resident import ResidentRounds


@pytest.mark.slow
def test_resident_rounds_equal_process_next_and_fetch_only_at_stops(tff_context):
  proc, round_batch = helpers.fedmeta_rounds('metasgd', 3)

  resident = ResidentRounds(proc, f'localhost:{tff_context.port}', 3,
                            needs_state=lambda r: r in (2, 5))
  state = single = proc.initialize()
  try:
    for r in range(1, 6):
      single, expected = proc.next(single, round_batch(r))
      state, metrics, _ = resident.next(state, r, round_batch(r))
      for key in expected:
        np.testing.assert_allclose(metrics[key], expected[key], rtol=1e-5)
      # Fetched at the stops only; in between the caller keeps the last fetched state.
      assert int(state['round_num']) == (r if r in (2, 5) else (0 if r == 1 else 2))
    for x, y in zip(tf.nest.flatten(state), tf.nest.flatten(single)):
      np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    # A state that was not returned by `next` is uploaded: restart from the initial state.
    restarted = resident.next(proc.initialize(), 2, round_batch(2)).state
    assert int(restarted['round_num']) == 1
  finally:
    resident.close()

