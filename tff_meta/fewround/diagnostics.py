"""How discriminative a few-round embedding is at phi (issue #14's degrading meta-training).

Park et al. (`../shared/papers/001_*.txt`) classify by the squared Euclidean
distance to class prototypes (Eq. 1-2), so the softmax over -d^2 is as sharp
as the embedding is spread. `embedding_stats` measures, over a list of
clients' support sets embedded with one phi (theta_0, before any local step):

- `|f|`: the mean norm of an embedding f(x);
- `between`: the mean squared distance between two of a client's class
  prototypes;
- `within`: the mean squared distance of a support example to its own
  class's prototype;
- `ratio`: between / within; the larger, the better separated the classes
  (nan when within is 0: one support example per class);
- `loss`: Eq. 2 at phi (ln N for a uniform N-way prediction), with the
  distances times tau for the `scaled_distance` classifier;
- `tau`: that classifier's learned temperature exp(t) (1 for the others).

`benchmarks/fewround_embedding.py` runs it on every kept checkpoint of a run
(docs/RESULTS.md of 3ab6296, §9a).
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_meta.fewround import prototypes as proto_lib


def read_phi(state_dir: str, count: int) -> List[np.ndarray]:
  """phi's `count` tensors from a saved program state (`checkpoints/program_state_<n>`)."""
  reader = tf.train.load_checkpoint(os.path.join(state_dir, 'variables', 'variables'))
  return [reader.get_tensor(f'_value/phi/{i}/.ATTRIBUTES/VARIABLE_VALUE') for i in range(count)]


def graph_embed(model) -> Callable[[Sequence[np.ndarray], np.ndarray], np.ndarray]:
  """`model.embed` as a numpy function (phi, x) -> f(x), run in a tf.compat.v1 graph: the
  Keras functional model runs only in a graph or a TFF computation."""
  graph = tf.Graph()
  with graph.as_default():
    weights = [tf.compat.v1.placeholder(tf.float32, w.shape) for w in model.initial_weights]
    x = tf.compat.v1.placeholder(model.backbone.x_spec.dtype, model.backbone.x_spec.shape)
    f = model.embed(weights, x)
  session = tf.compat.v1.Session(graph=graph)
  return lambda phi, images: session.run(f, {**dict(zip(weights, phi)), x: images})


def embedding_stats(model, phi: Sequence[np.ndarray], clients: Sequence[Dict],
                    embed: Optional[Callable] = None) -> Dict[str, float]:
  """The module docstring's numbers for one phi, averaged over `clients` (values with
  `support_x`, `support_y`). `embed(phi, x)` defaults to `graph_embed(model)`."""
  embed = embed or graph_embed(model)
  tau = temperature(model, phi)
  out = {'|f|': [], 'between': [], 'within': [], 'loss': []}
  for c in clients:
    f = np.asarray(embed(phi, c['support_x']), np.float32)
    y = np.asarray(c['support_y'])
    protos, counts = proto_lib.prototypes(tf.constant(f), tf.constant(y), model.ways)
    protos, present = protos.numpy(), counts.numpy() > 0
    p = protos[present]
    d = ((p[:, None] - p[None]) ** 2).sum(-1)
    out['|f|'].append(float(np.linalg.norm(f, axis=1).mean()))
    out['between'].append(float(d[~np.eye(len(p), dtype=bool)].mean()))
    out['within'].append(float(((f - protos[y]) ** 2).sum(-1).mean()))
    root = np.float32(np.sqrt(tau))   # tau * d = d between sqrt(tau)-scaled points
    out['loss'].append(float(proto_lib.prototype_loss(
        tf.constant(root * f), tf.constant(y), tf.constant(root * protos),
        tf.constant(present, tf.float32))))
  stats = {k: float(np.mean(v)) for k, v in out.items()}
  # one support example per class has no spread within: the ratio is undefined (nan)
  stats['ratio'] = stats['between'] / stats['within'] if stats['within'] > 0 else float('nan')
  stats['tau'] = tau
  return stats


def temperature(model, phi: Sequence[np.ndarray]) -> float:
  """tau = exp(t) of a `scaled_distance` model's phi (its one head weight); 1 otherwise."""
  if not model.classifier.learns_temperature:
    return 1.0
  return float(np.exp(phi[model.num_backbone]))
