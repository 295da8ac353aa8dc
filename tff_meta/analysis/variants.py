"""Which runs of one method are the same variant: the config keys that differ between them.

The report programs (`report`, `few_round_report`, `recommend_report`) group
runs by setting and method, then split a method's runs wherever a config key
(other than the seed, the output folder and the like) differs between them,
and name each variant by those keys, e.g. `MAML [inner_lr=0.05]`. Runs that
agree on every key share the empty label and are seeds of one entry.
"""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Sequence


def variant_labels(flats: Sequence[Mapping[str, Any]],
                   missing: Callable[[str], Any] = lambda key: '(absent)',
                   name: Callable[[str], str] = lambda key: key) -> List[str]:
  """A label per flat config: `name(k)=value` for every key whose value differs
  between the configs (compared by repr), ', '-joined in key order; '' for all
  when none differs. A config without a key shows `missing(key)` there."""
  shown = lambda flat, key: flat[key] if key in flat else missing(key)
  keys = sorted(set().union(*flats)) if flats else []
  varying = [k for k in keys if len({repr(shown(f, k)) for f in flats}) > 1]
  return [', '.join(f'{name(k)}={shown(f, k)}' for k in varying) for f in flats]


def labelled(method: str, label: str) -> str:
  """`method [label]`, or `method` for the empty label."""
  return f'{method} [{label}]' if label else method


def repeated(seeds: Sequence[int]) -> List[int]:
  """The seeds that occur more than once, sorted."""
  return sorted({s for s in seeds if list(seeds).count(s) > 1})
