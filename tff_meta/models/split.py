"""Which layers of a model are shared with the server and which stay on the client.

One implementation serves every personalization-layer method:
- FedPer (Arivazhagan et al. 2019; report 003 Sec. 5.1): base shared, head personal;
- LG-FedAvg (Liang et al. 2020; report 003 Sec. 5.2): representation personal,
  head shared;
- FedRep (Collins et al. 2021): body shared, head personal;
- FedMeta+FedPer (report 003 Sec. 6): shared layers meta-learned, fully
  connected personal layers kept on the client.

A split is given by selectors, each a layer index among the model's layers
with trainable weights (Python style: -1 is the last such layer) or a Keras
layer name. `personal_layers = "-1"` keeps the output layer on the client.
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence, Tuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class ModelSplit:
  """Indices of the trainable weights that stay on the client and that are shared."""
  personal: Tuple[int, ...]
  shared: Tuple[int, ...]
  num_weights: int

  def take_personal(self, weights: Sequence) -> List:
    return [weights[i] for i in self.personal]

  def take_shared(self, weights: Sequence) -> List:
    return [weights[i] for i in self.shared]

  def merge(self, shared: Sequence, personal: Sequence) -> List:
    """The full weight list from its shared and personal parts."""
    merged = [None] * self.num_weights
    for i, w in zip(self.shared, shared):
      merged[i] = w
    for i, w in zip(self.personal, personal):
      merged[i] = w
    return merged


def _describe(model) -> str:
  layers = {}
  for (index, name), w in zip(model.weight_layers, model.initial_trainable):
    layers.setdefault(index, [name, 0])[1] += int(np.size(w))
  return ', '.join(f'{i}/{i - len(layers)} {name} ({n} params)' for i, (name, n) in layers.items())


def parse_selectors(text: str) -> List[str]:
  return [s.strip() for s in str(text).split(',') if s.strip()]


def resolve(model, personal_layers: str, *, flip: bool = False) -> ModelSplit:
  """The split of `model` whose personal part is the layers `personal_layers` selects.

  Args:
    model: a `ModelSpec` (its `weight_layers` map weights to layers).
    personal_layers: comma-separated selectors (see module docstring).
    flip: make the selected layers the *shared* part instead (LG-FedAvg's
      natural description: the selected head is global).

  Raises:
    ValueError: a selector names no layer, or the split leaves one side empty.
  """
  if not model.weight_layers:
    raise ValueError(f'Model {model.name!r} has no per-layer weight map; it cannot be split.')
  num_layers = model.weight_layers[-1][0] + 1
  selectors = parse_selectors(personal_layers)
  if not selectors:
    raise ValueError('personal_layers is empty; name at least one layer, e.g. personal_layers = "-1" '
                     f'(the last layer). Layers of {model.name}: {_describe(model)}.')
  chosen = set()
  for sel in selectors:
    try:
      index = int(sel)
    except ValueError:
      matches = {i for i, name in model.weight_layers if name == sel}
      if not matches:
        raise ValueError(f'personal_layers: {sel!r} names no layer of {model.name}; its layers '
                         f'(index/negative index name) are: {_describe(model)}.') from None
      chosen |= matches
      continue
    if not -num_layers <= index < num_layers:
      raise ValueError(f'personal_layers: layer index {index} names no layer; {model.name} has '
                       f'{num_layers} layers with weights: {_describe(model)}.')
    chosen.add(index % num_layers)
  selected = tuple(i for i, (layer, _) in enumerate(model.weight_layers) if layer in chosen)
  rest = tuple(i for i in range(len(model.weight_layers)) if i not in selected)
  personal, shared = (rest, selected) if flip else (selected, rest)
  if not shared or not personal:
    raise ValueError(f'personal_layers={personal_layers!r} leaves no '
                     f'{"shared" if not shared else "personal"} layer in {model.name}; '
                     f'its layers are: {_describe(model)}.')
  return ModelSplit(personal=personal, shared=shared, num_weights=len(model.weight_layers))
