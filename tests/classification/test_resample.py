"""Per-round support/query resampling (`resample_support`, FedMeta Algorithm 1 line 13).

Training clients get a fresh split every round, the same for the same (seed,
round, client): the resident path equals the plain one, a stopped-and-resumed
run equals an uninterrupted one, and validation and test clients keep their
fixed split.
"""

import asyncio
import csv
import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms import Hparams
from tff_meta.data import protocol
from tff_meta.data import client_data
from tff_meta.classification import experiment
from tff_meta.classification import config as config_lib
from tff_meta.runtime.pool import WorkerPool

CFG = config_lib.ExperimentConfig(
    algorithm='fedmeta_maml', dataset='digits', model='mlp', rounds=6, clients_per_round=3,
    eval_every=3, checkpoint_every=3, seed=2, support_fraction=0.3, resample_support=True,
    data={'num_clients': 30}, model_options={'hidden_units': [8]},
    hparams=Hparams(inner_lr=0.1, server_optimizer='adam', server_lr=0.01))


CAP = 4   # max_client_examples of the fixture's capped run


def _rows(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def test_the_key_is_a_typed_flag_off_by_default():
  assert config_lib.ExperimentConfig().resample_support is False
  assert config_lib.apply_overrides(CFG, {'resample_support': 'false'}).resample_support is False
  assert 'afresh every round' in config_lib.flag_help('resample_support')
  with pytest.raises(config_lib.ConfigError, match='--resample_support: expected a bool'):
    config_lib.apply_overrides(CFG, {'resample_support': 'sometimes'})


def test_round_data_resamples_episodes_only_when_asked():
  data = experiment.prepare_data(CFG)
  clients = data.train[:3]
  fixed = client_data.round_data('episode', clients, 2, 5)
  again = client_data.round_data('episode', clients, 2, 5, resample=True)
  for c, f, a in zip(clients, fixed, again):
    np.testing.assert_array_equal(f['support_x'], c.support.x)
    r = protocol.resample_split(c, 2, 5)
    np.testing.assert_array_equal(a['support_x'], r.support.x)
    np.testing.assert_array_equal(a['query_y'], r.query.y)
    assert not np.array_equal(a['support_x'], f['support_x'])
  # FedAvg's data are all of the client's data, shuffled per round, either way.
  for f, a in zip(client_data.round_data('full', clients, 2, 5),
                  client_data.round_data('full', clients, 2, 5, resample=True)):
    np.testing.assert_array_equal(a['x'], f['x'])


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """Resampled: plain path for 6 rounds; resident path (the default) stopped after
  4 and resumed to 6, recording every split it turns into an episode; fixed
  splits, plain path, 6 rounds; resampled and capped at CAP examples a client, 1 round."""
  base = tmp_path_factory.mktemp('resample')
  outs, seen = {}, []
  with WorkerPool.local(1) as pool:
    def run(name, **changes):
      cfg = dataclasses.replace(CFG, output_dir=str(base / name), **changes)
      experiment.run(cfg, pool=pool, show_progress=False)   # prepares its own data
      outs[name] = base / name

    run('plain', resident_state=False)
    with pytest.MonkeyPatch.context() as patch:
      real = client_data.episode
      patch.setattr(client_data, 'episode', lambda c: seen.append(c) or real(c))
      run('resumed', rounds=4)
      run('resumed')
    run('fixed', resident_state=False, resample_support=False)
    run('capped', rounds=1, max_client_examples=CAP)
  outs['initial'] = experiment.build_algorithm(
      CFG, experiment.build_model(CFG, experiment.prepare_data(CFG))).process.initialize
  return outs, seen


@pytest.mark.slow
def test_resumed_resident_run_equals_uninterrupted_plain_run(runs, tff_context):
  outs, _ = runs
  plain, resumed = _rows(outs['plain'] / 'metrics.csv'), _rows(outs['resumed'] / 'metrics.csv')
  assert [r['round'] for r in resumed] == [str(r) for r in range(1, 7)]
  for a, b in zip(plain, resumed):
    for key in ('train_loss', 'train_accuracy'):
      np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-5)
  evals = {n: {r['round']: r for r in _rows(outs[n] / 'eval.csv')} for n in ('plain', 'resumed')}
  np.testing.assert_allclose(float(evals['resumed']['6']['test_accuracy']),
                             float(evals['plain']['6']['test_accuracy']), atol=1e-6)
  for name in ('plain', 'resumed'):
    assert 'resample_support = true' in (outs[name] / 'config.toml').read_text()
  managers = {n: tff.program.FileProgramStateManager(str(outs[n] / 'checkpoints'))
              for n in ('plain', 'resumed')}
  a, b = (asyncio.run(managers[n].load(6, outs['initial']())) for n in ('plain', 'resumed'))
  for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
    np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_resampling_changes_training(runs):
  outs, _ = runs
  plain, fixed = _rows(outs['plain'] / 'metrics.csv'), _rows(outs['fixed'] / 'metrics.csv')
  # Same sampled clients and initial model: round 1 differs only by the split.
  assert float(plain[0]['train_loss']) != pytest.approx(float(fixed[0]['train_loss']), rel=1e-4)


@pytest.mark.slow
def test_only_training_clients_are_resampled(runs):
  _, seen = runs
  data = experiment.prepare_data(CFG)   # the fixed splits
  fixed = {c.client_id: c for c in data.train + data.validation + data.test}
  held_out = {c.client_id for c in data.validation + data.test}
  scored = [c for c in seen if c.client_id in held_out]
  trained = [c for c in seen if c.client_id not in held_out]
  # evaluated at rounds 0, 3, 4 (the end of the first session) and 6
  assert len(scored) == 4 * len(held_out)
  for c in scored:
    np.testing.assert_array_equal(c.support.x, fixed[c.client_id].support.x)
    np.testing.assert_array_equal(c.query.y, fixed[c.client_id].query.y)
  assert trained
  for c in trained:
    assert len(c.support) == len(fixed[c.client_id].support)
    assert not np.array_equal(c.support.x, fixed[c.client_id].support.x)


@pytest.mark.slow
def test_max_client_examples_reaches_the_rounds_the_run_trains(runs):
  """The config's cap goes from `experiment.run` to the round's data: round 1's client FLOPs
  (metrics.csv, counted on the data the round sent) are those of the capped round data."""
  outs, _ = runs
  data = experiment.prepare_data(CFG)
  alg = experiment.build_algorithm(CFG, experiment.build_model(CFG, data))
  idx = client_data.sample_clients(len(data.train), CFG.clients_per_round, CFG.seed, 1)
  clients = [data.train[i] for i in idx]
  capped = client_data.round_data('episode', clients, CFG.seed, 1, resample=True,
                                  max_examples=CAP)
  whole = client_data.round_data('episode', clients, CFG.seed, 1, resample=True)
  assert all(len(d['support_y']) + len(d['query_y']) <= CAP for d in capped)
  flops = lambda batch: float(sum(alg.client_flops(d) for d in batch))
  assert flops(capped) < flops(whole)
  assert float(_rows(outs['capped'] / 'metrics.csv')[0]['client_flops']) == flops(capped)
  assert float(_rows(outs['plain'] / 'metrics.csv')[0]['client_flops']) == flops(whole)
  assert 'max_client_examples = 4' in (outs['capped'] / 'config.toml').read_text()
