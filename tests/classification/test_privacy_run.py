"""A DP + secure-aggregation run through the training loop (issue #18): epsilon
after every evaluation in eval.csv, in results.json's summary and the table;
the aggregator's state is checkpointed and a resumed run continues it; the
same run on a pool of two workers (TFF's mergeable context) also runs."""

import csv
import dataclasses
import json

import numpy as np
import pytest

from tff_meta.algorithms import Hparams
from tff_meta.analysis import tables
from tff_meta.classification import config as config_lib
from tff_meta.classification import experiment, privacy
from tff_meta.runtime.pool import WorkerPool

CFG = config_lib.ExperimentConfig(
    algorithm='fedmeta_fomaml', dataset='digits', model='mlp', rounds=4, clients_per_round=4,
    eval_every=2, checkpoint_every=2, seed=2, data={'num_clients': 30},
    model_options={'hidden_units': [8]},
    hparams=Hparams(inner_lr=0.1, server_optimizer='sgd', server_lr=0.5),
    dp_noise_multiplier=1.0, dp_clip='0.5', secure_aggregation=True)


def _rows(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  data = experiment.prepare_data(CFG)
  model = experiment.build_model(CFG, data)
  base = tmp_path_factory.getbasetemp()
  results = {}
  for name, rounds in (('run', 2), ('run', 4)):   # stopped after 2, resumed to 4
    cfg = dataclasses.replace(CFG, rounds=rounds, output_dir=str(base / name))
    results[name] = experiment.run(cfg, data=data, model=model, show_progress=False)
  with WorkerPool.local(2) as pool:
    cfg = dataclasses.replace(CFG, rounds=2, output_dir=str(base / 'pool'))
    results['pool'] = experiment.run(cfg, data=data, model=model, pool=pool,
                                     show_progress=False)
  return base, results, privacy.budget(CFG, len(data.train))


@pytest.mark.slow
def test_epsilon_after_every_evaluation(runs):
  base, _, budget = runs
  rows = _rows(base / 'run' / 'eval.csv')
  assert [r['round'] for r in rows] == ['0', '2', '4']
  for r in rows:
    assert float(r['epsilon']) == pytest.approx(budget.epsilon(int(r['round'])))
  eps = [float(r['epsilon']) for r in rows]
  assert eps[0] == 0.0 and 0 < eps[1] < eps[2]
  assert (base / 'run' / 'tensorboard' / 'eval').is_dir()


@pytest.mark.slow
def test_final_epsilon_in_results_and_table(runs):
  base, results, budget = runs
  with open(base / 'run' / 'results.json') as f:
    summary = json.load(f)['summary']
  assert summary['epsilon'] == pytest.approx(budget.epsilon(4))
  assert summary['delta'] == pytest.approx(budget.delta)
  table = tables.format_table([results['run'].row()])
  assert 'ε (DP)' in table and f'{budget.epsilon(4):.2f}' in table


@pytest.mark.slow
def test_resumed_run_continues_the_checkpointed_aggregator_state(runs):
  base, results, _ = runs
  metrics = _rows(base / 'run' / 'metrics.csv')
  assert [r['round'] for r in metrics] == ['1', '2', '3', '4']
  assert np.isfinite(results['run'].test.accuracy)


@pytest.mark.slow
def test_runs_on_a_pool(runs):
  base, results, budget = runs
  assert [r['round'] for r in _rows(base / 'pool' / 'eval.csv')] == ['0', '2']
  assert results['pool'].epsilon == pytest.approx(budget.epsilon(2))
