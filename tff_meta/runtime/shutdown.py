"""Quiet interpreter shutdown after importing TFF.

TFF 0.87 installs a default local context at import whose service manager's
`__del__` fails at interpreter shutdown ("'NoneType' object has no attribute
'Popen'"), printing a traceback after every program. `tff_meta/__init__.py`
registers `drop_tff_default_context` with atexit; it frees that context while
modules are still alive.
"""

import gc

import tensorflow_federated as tff
from tensorflow_federated.python.core.impl.context_stack import context_base


class _Closed(context_base.SyncContext):

  def invoke(self, comp, arg):
    raise RuntimeError('The interpreter is shutting down; no TFF context is available.')


def drop_tff_default_context() -> None:
  tff.framework.set_default_context(_Closed())
  gc.collect()
