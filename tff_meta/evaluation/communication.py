"""Bytes moved per round, computed from a process's TFF type signature.

Download: the broadcast params (theta, plus alpha for Meta-SGD) per client.
Upload: each client's result (update, weight and metric sums).
"""

from __future__ import annotations

import numpy as np
import tensorflow_federated as tff


def type_num_bytes(type_spec: tff.Type) -> int:
  """Bytes of a fully-shaped TFF type (tensors and structs of tensors)."""
  if isinstance(type_spec, tff.FederatedType):
    return type_num_bytes(type_spec.member)
  if isinstance(type_spec, tff.TensorType):
    shape = list(type_spec.shape)
    if any(d is None for d in shape):
      raise ValueError(f'Cannot size a tensor of unknown shape {type_spec}.')
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(type_spec.dtype).itemsize
  if isinstance(type_spec, tff.StructType):
    return sum(type_num_bytes(t) for _, t in tff.structure.iter_elements(type_spec))
  raise TypeError(f'Cannot size type {type_spec}.')


def round_bytes(process, num_clients: int) -> dict:
  down = type_num_bytes(process.params_type) * num_clients
  up = type_num_bytes(process.client_output_type) * num_clients
  return {'bytes_down': down, 'bytes_up': up}
