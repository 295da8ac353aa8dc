"""The training loop with rounds_per_call > 1, or with the state resident on the
worker, equals one round per call (issue #8): same sampled clients, same
per-round metrics rows, same checkpoints and state, and a resumed run equals an
uninterrupted one."""

import asyncio
import csv
import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_meta.algorithms import Hparams
from tff_meta.program import config as config_lib
from tff_meta.program import experiment
from tff_meta.runtime.pool import WorkerPool

CFG = config_lib.ExperimentConfig(
    algorithm='fedmeta_metasgd', dataset='digits', model='mlp', rounds=9, clients_per_round=3,
    eval_every=6, checkpoint_every=4, seed=1, data={'num_clients': 30},
    model_options={'hidden_units': [8]},
    hparams=Hparams(inner_lr=0.1, server_optimizer='adam', server_lr=0.01))


def _rows(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """One round per call for 9 rounds; 4 per call, stopped after 5 and resumed to 9;
  resident state for 9 rounds."""
  data = experiment.prepare_data(CFG)
  model = experiment.build_model(CFG, data)
  outs = {}
  for name, k, rounds in (('single', 1, 9), ('multi', 4, 5), ('multi', 4, 9), ('resident', 1, 9),
                          ('pool_resident', 1, 9)):
    out = tmp_path_factory.getbasetemp() / name
    cfg = dataclasses.replace(CFG, rounds_per_call=k, rounds=rounds, output_dir=str(out),
                              resident_state=name.endswith('resident'))
    if name == 'pool_resident':   # the state on worker 0, the clients split over 2 workers
      with WorkerPool.local(2) as pool:
        experiment.run(cfg, data=data, model=model, pool=pool, show_progress=False)
    else:
      experiment.run(cfg, data=data, model=model, show_progress=False)
    outs[name] = out
  # the finished single run, run again: read back from its checkpoint, not trained
  again = dataclasses.replace(CFG, rounds=9, output_dir=str(outs['single']))
  outs['rerun'] = experiment.run(again, data=data, model=model, show_progress=False)
  outs['initial'] = experiment.build_algorithm(CFG, model, data).process.initialize
  return outs


@pytest.mark.slow
@pytest.mark.parametrize('name', ['single', 'multi'])
def test_train_seconds_count_every_round_once(runs, name):
  """results.json's train_seconds is metrics.csv's round_seconds summed: a resumed
  run (multi) counts both sessions, a finished run run again keeps its time."""
  with open(runs[name] / 'results.json') as f:
    summary = json.load(f)['summary']
  rows = _rows(runs[name] / 'metrics.csv')
  assert len(rows) == 9
  total = sum(float(r['round_seconds']) for r in rows)
  assert total > 0
  np.testing.assert_allclose(summary['train_seconds'], total, rtol=1e-9)
  if name == 'single':
    np.testing.assert_allclose(runs['rerun'].train_seconds, total, rtol=1e-9)


def _state(runs, name, round_num):
  manager = tff.program.FileProgramStateManager(str(runs[name] / 'checkpoints'))
  return asyncio.run(manager.load(round_num, runs['initial']()))


@pytest.mark.slow
@pytest.mark.parametrize('name', ['multi', 'resident', 'pool_resident'])
def test_run_equals_single_rounds(runs, name):
  single, other = _rows(runs['single'] / 'metrics.csv'), _rows(runs[name] / 'metrics.csv')
  assert [r['round'] for r in other] == [str(r) for r in range(1, 10)]
  for a, b in zip(single, other):
    for key in ('train_loss', 'train_accuracy', 'num_rejected'):
      np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-5)
  evals = {n: {r['round']: r for r in _rows(runs[n] / 'eval.csv')} for n in ('single', name)}
  assert list(evals['single']) == ['0', '6', '9']
  # multi: 5 is the end of its first session
  assert list(evals[name]) == (['0', '5', '6', '9'] if name == 'multi' else ['0', '6', '9'])
  for round_num in ('6', '9'):
    np.testing.assert_allclose(float(evals[name][round_num]['test_accuracy']),
                               float(evals['single'][round_num]['test_accuracy']), atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['multi', 'resident', 'pool_resident'])
def test_checkpoints_land_on_the_same_rounds_with_the_same_state(runs, tff_context, name):
  for round_num in (8, 9):
    a, b = _state(runs, 'single', round_num), _state(runs, name, round_num)
    assert int(b['round_num']) == round_num
    for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
      np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)


def test_bad_settings_are_named():
  with pytest.raises(config_lib.ConfigError, match='rounds_per_call must be >= 1'):
    dataclasses.replace(CFG, rounds_per_call=0).validate()
  assert config_lib.ExperimentConfig().resident_state is True   # the fast path is the default


@pytest.mark.slow
def test_unrolled_rounds_fall_back_from_resident_state_with_a_note(tmp_path, capfd):
  cfg = dataclasses.replace(CFG, rounds=2, rounds_per_call=2, resident_state=True,
                            output_dir=str(tmp_path))
  experiment.run(cfg, show_progress=False)
  err = capfd.readouterr().err
  assert 'note: rounds_per_call=2' in err and 'Traceback' not in err


@pytest.mark.slow
def test_resident_state_with_client_states_equals_single_rounds(tmp_path):
  """SCAFFOLD keeps a control variate per client: the server state stays on the
  worker while the sampled clients' states still cross every round."""
  cfg = dataclasses.replace(CFG, algorithm='scaffold', rounds=6, eval_every=3,
                            checkpoint_every=3,
                            hparams=Hparams(client_lr=0.05, local_epochs=1, batch_size=8,
                                            client_optimizer='sgd'))
  data = experiment.prepare_data(cfg)
  model = experiment.build_model(cfg, data)
  outs = {}
  for resident in (False, True):
    out = tmp_path / ('resident' if resident else 'single')
    experiment.run(dataclasses.replace(cfg, output_dir=str(out), resident_state=resident),
                   data=data, model=model, show_progress=False)
    outs[resident] = out
  for name in ('metrics.csv', 'eval.csv'):
    a, b = _rows(outs[False] / name), _rows(outs[True] / name)
    assert [r['round'] for r in a] == [r['round'] for r in b]
    for x, y in zip(a, b):
      for key in x:
        if key.endswith(('loss', 'accuracy', 'client_mean', 'client_std')):
          np.testing.assert_allclose(float(y[key]), float(x[key]), rtol=1e-5, atol=1e-6)
  states = {r: sorted(p.relative_to(outs[r]) for p in (outs[r] / 'client_states').rglob('*.npz'))
            for r in outs}
  assert states[True] == states[False] and states[True]
  for rel in states[True]:
    a, b = np.load(outs[False] / rel), np.load(outs[True] / rel)
    for key in a.files:
      np.testing.assert_allclose(b[key], a[key], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_unrolled_rounds_refuse_client_states(tmp_path):
  cfg = dataclasses.replace(CFG, algorithm='scaffold', rounds=2, rounds_per_call=2,
                            output_dir=str(tmp_path),
                            hparams=Hparams(client_lr=0.05, client_optimizer='sgd'))
  with pytest.raises(config_lib.ConfigError, match='use resident_state = true instead'):
    experiment.run(cfg, show_progress=False)
