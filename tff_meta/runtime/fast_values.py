"""A round's client data sent to a TFF worker without TFF's nested proto copies.

TFF 0.87's `value_serialization.serialize_value` builds each struct and
federated value from its serialized children, and protobuf copies a child
into its parent at every level: a round's data (64 EMNIST clients, 20 MB)
are copied once per level of nesting, ~0.17 s of Python per round, more than
the MLP's whole round in plain TF. `value_proto` writes the same `Value`
proto in place (children added to their parent; a numpy array of the
type's dtype and shape is written by TFF's `array.to_proto_content`, any
other leaf by TFF's serializer and copied once), and `create_value` sends it as
`RemoteExecutor.create_value` does. The worker receives the same proto
(`tests/runtime/test_grouped_rounds.py`, `test_fast_values_build_tffs_proto`, compares them).
"""

from __future__ import annotations

import numpy as np
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.python.core.impl.compiler import array
# Not exported under tff.framework in TFF 0.87.
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.executors import value_serialization
from tensorflow_federated.python.core.impl.types import type_serialization


def value_proto(value, type_spec: tff.Type, out: executor_pb2.Value) -> executor_pb2.Value:
  """Writes `value` of `type_spec` into `out` (TFF's serialization, built in place)."""
  if isinstance(type_spec, tff.FederatedType):
    values = [value] if type_spec.all_equal else list(value)
    out.federated.SetInParent()
    for v in values:
      value_proto(v, type_spec.member, out.federated.value.add())
    out.federated.type.CopyFrom(type_serialization.serialize_type(type_spec).federated)
  elif isinstance(type_spec, tff.StructType):
    elements = list(tff.structure.iter_elements(tff.structure.from_container(value)))
    types = list(tff.structure.iter_elements(type_spec))
    out.struct.SetInParent()   # an empty struct is a value too (e.g. a DP aggregator's state)
    if len(elements) != len(types):
      raise TypeError(f'A value of {len(elements)} elements cannot have the type {type_spec}.')
    for (name, element_type), (_, element) in zip(types, elements):
      added = out.struct.element.add()
      if name:
        added.name = name
      value_proto(element, element_type, added.value)
  elif _plain_array(value, type_spec):
    out.array.CopyFrom(array.to_proto_content(value))
  else:
    out.MergeFrom(value_serialization.serialize_value(value, type_spec)[0])
  return out


def _plain_array(value, type_spec: tff.Type) -> bool:
  """Whether `value` is a numpy array of exactly `type_spec`'s dtype and a shape it admits."""
  if not (isinstance(value, np.ndarray) and isinstance(type_spec, tff.TensorType)
          and value.dtype == type_spec.dtype and value.dtype.kind in 'biuf'):
    return False
  shape = type_spec.shape
  return shape is not None and len(shape) == value.ndim and all(
      d is None or d == v for d, v in zip(shape, value.shape))


async def create_value(executor: tff.framework.RemoteExecutor, value, type_spec: tff.Type):
  """`executor.create_value(value, type_spec)` with the proto built by `value_proto`."""
  request = executor_pb2.CreateValueRequest(executor=executor._executor_id)  # pylint: disable=protected-access
  value_proto(value, type_spec, request.value)
  response = executor._stub.create_value(request)  # pylint: disable=protected-access
  return remote_executor.RemoteValue(response.value_ref, type_spec, executor)
