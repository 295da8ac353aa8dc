"""A name -> builder registry, so programs never branch on algorithm names."""

from __future__ import annotations

import difflib
from typing import Callable, Dict, Generic, Iterator, TypeVar

T = TypeVar('T')


class UnknownNameError(KeyError):
  """A name that no registry entry matches; the message lists valid names."""

  def __str__(self) -> str:  # KeyError quotes its message; show it plainly.
    return str(self.args[0])


class Registry(Generic[T]):
  """Maps names to builders.

  >>> MODELS = Registry('model')
  >>> @MODELS.register('mlp')
  ... def build_mlp(...): ...
  >>> MODELS.get('mlp')
  """

  def __init__(self, kind: str):
    self._kind = kind
    self._entries: Dict[str, T] = {}

  def register(self, name: str) -> Callable[[T], T]:
    def decorator(obj: T) -> T:
      if name in self._entries:
        raise ValueError(f'{self._kind} {name!r} is registered twice.')
      self._entries[name] = obj
      return obj
    return decorator

  def add(self, name: str, obj: T) -> None:
    self.register(name)(obj)

  def remove(self, name: str) -> None:
    """Drops `name` (for entries a test registers for a while)."""
    self._entries.pop(name)

  def get(self, name: str) -> T:
    try:
      return self._entries[name]
    except KeyError:
      close = difflib.get_close_matches(name, self._entries, n=1)
      hint = f' Did you mean {close[0]!r}?' if close else ''
      raise UnknownNameError(
          f'Unknown {self._kind} {name!r}.{hint} Known {self._kind}s: '
          f'{", ".join(sorted(self._entries))}.') from None

  def names(self) -> list[str]:
    return sorted(self._entries)

  def __contains__(self, name: str) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(self.names())
