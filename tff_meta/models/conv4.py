"""Conv4, the few-shot backbone of Vinyals et al. (2016) used by few-round learning.

FRL (Park et al., "Few-Round Learning for Federated Learning", Sec. 4 "Implementation
details"): 4 blocks of [3x3 convolution with 32 filters, ReLU, normalization,
2x2 max pooling]. The distance classifier uses the CNN output directly; the
linear variant and the baselines add a linear layer.

Normalization: the paper uses batch normalization, which TFF's functional
models refuse (its moving statistics are non-trainable variables that update;
see `functional.py`). The default here is group normalization (Wu & He 2018),
which normalizes each example over groups of channels: it has only trainable
scale/offset, so the model stays a pure function of its weights, and an
example's output does not depend on the rest of its batch (prototypes and
predictions are the same whether a client evaluates one image or a hundred).
`norm='none'` drops the normalization, for comparison (docs/RESULTS.md).

Outputs (registered in `MODELS` as 'conv4'):
- num_classes == 0: the dense feature map g(x) of the last block,
  [batch, h, w, filters]; FRL averages it over positions to get f(x) and
  uses the positions themselves in the GPAL loss (Eq. 3).
- num_classes > 0: global average pooling and a linear layer (logits).
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tff_meta.models.keras_models import MODELS

NORMS = ('group', 'none')


def _check(norm: str, pool_padding: str) -> None:
  if norm not in NORMS:
    raise ValueError(f'conv4 norm must be one of {NORMS}, got {norm!r}.')
  if pool_padding not in ('valid', 'same'):
    raise ValueError(f"conv4 pool_padding must be 'valid' or 'same', got {pool_padding!r}.")


@MODELS.register('conv4')
def conv4(element_shape: Sequence[int], num_classes: int = 0, filters: int = 32,
          blocks: int = 4, norm: str = 'group', groups: int = 4,
          pool_padding: str = 'valid') -> tf.keras.Model:
  """Conv4 on [h, w] (grey) or [h, w, c] images.

  Args:
    element_shape: one image's shape.
    num_classes: 0 for the backbone (dense feature map), else logits.
    filters, blocks: 32 and 4 in the paper.
    norm: 'group' (default; `groups` groups of channels) or 'none'.
    pool_padding: 'valid' (the paper, 84x84 -> 5x5) or 'same' (28x28 -> 2x2,
      so small images keep more than one position for GPAL).
  """
  _check(norm, pool_padding)
  shape = tuple(int(d) for d in element_shape)
  layers = [tf.keras.layers.InputLayer(input_shape=shape)]
  if len(shape) == 2:
    layers.append(tf.keras.layers.Reshape(shape + (1,)))
  for _ in range(blocks):
    layers.append(tf.keras.layers.Conv2D(filters, 3, padding='same', activation='relu'))
    if norm == 'group':
      layers.append(tf.keras.layers.GroupNormalization(groups=groups))
    layers.append(tf.keras.layers.MaxPool2D(2, padding=pool_padding))
  if num_classes > 0:
    layers += [tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(num_classes)]
  return tf.keras.Sequential(layers, name='conv4')
