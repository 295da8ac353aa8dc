"""Tiny few-round models, clients and a graph runner shared by the fewround tests, and the
programs.train runs of the program tests (test_program*.py)."""

import collections
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tests.conftest import REPO
from tff_meta.fewround.model import build_few_round_model

PROGRAM_CONFIG = 'configs/fewround/femnist62_5way_iid.toml'

SHAPE = (8, 8)
WAYS = 3


def tiny(classifier='distance'):
  return build_few_round_model('conv4', SHAPE, classifier, WAYS, seed=0, filters=4, blocks=2,
                               groups=2)


def client(rng, support_per_class, query=4, classes=(0, 1, 2)):
  sy = np.concatenate([np.full(n, c) for c, n in zip(classes, support_per_class)])
  qy = rng.choice(classes, query)
  return collections.OrderedDict(
      support_x=rng.normal(size=(len(sy),) + SHAPE).astype(np.float32),
      support_y=sy.astype(np.int32),
      query_x=rng.normal(size=(query,) + SHAPE).astype(np.float32),
      query_y=qy.astype(np.int32), num_ways=np.int32(WAYS))


def clients():
  rng = np.random.default_rng(0)
  # different support sizes; the last client lacks class 2
  return [client(rng, (2, 2, 2)), client(rng, (5, 1, 3), query=6),
          client(rng, (3, 4), classes=(0, 1))]


def in_graph(fn, *args):
  """Runs a pure-TF function of numpy inputs in a graph (functional models need one)."""
  graph = tf.Graph()
  with graph.as_default():
    out = fn(*tf.nest.map_structure(tf.constant, args))
  with tf.compat.v1.Session(graph=graph) as sess:
    return sess.run(out)


def global_prototypes_at(model, theta, data):
  """P_R by hand: the support-size weighted class means of f_theta over the clients holding
  each class, and the mask of the classes some client holds (NumPy)."""
  embed = lambda theta, x: model.embed(theta, x)
  sums, weights = np.zeros((WAYS, model.feature_dim)), np.zeros(WAYS)
  for c in data:
    f = in_graph(embed, list(theta), c['support_x'])
    n = len(c['support_y'])
    for k in np.unique(c['support_y']):
      sums[k] += n * f[c['support_y'] == k].mean(0)
      weights[k] += n
  present = weights > 0
  protos = np.where(present[:, None], sums / np.maximum(weights, 1)[:, None], 0.0)
  return protos.astype(np.float32), present.astype(np.float32)


def run_program(*args):
  """`python -m programs.train --progress=false <args>` from the repository, TF's logging quiet."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'programs.train', '--progress=false', *args],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
