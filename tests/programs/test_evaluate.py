"""programs/evaluate.py: re-evaluating a finished run's checkpoint with other evaluation settings.

Two tiny digits runs (FedMeta(MAML) and FedAvg) train once through the
forking `program_runner`; every re-evaluation reads them and must leave them
byte for byte unchanged.
"""

import asyncio
import csv
import json
import os
import shutil

import numpy as np
import pytest

from tests import helpers
from tests.conftest import FIXTURES
from tests.programs.program_client import Runner, assert_clean_error, snapshot
from tff_meta.data import protocol
from tff_meta.data.embedded import load_digits
from tff_meta.data import client_data
from tff_meta.classification import experiment, reevaluation

pytestmark = pytest.mark.slow   # runs programs as subprocesses

TRAIN = ['--config=configs/demo/digits.toml', '--progress=false', '--rounds=4', '--eval_every=2',
         '--checkpoint_every=2', '--clients_per_round=3']
# The same computation on the same state and clients: the counts (accuracies) are equal; the
# mean loss may differ in its last bits (TF's summation order).
EXACT = ('accuracy', 'client_mean', 'client_std')
LEAF_FEMNIST = os.path.join(FIXTURES, 'leaf', 'femnist')   # real LEAF writers (28x28, 62 classes)


@pytest.fixture(scope='module')
def runner():
  r = Runner()
  yield r
  r.close()


@pytest.fixture(scope='module')
def runs(runner, tmp_path_factory):
  """algorithm -> the folder of a finished 4-round run."""
  root = tmp_path_factory.mktemp('runs')
  out = {}
  for algorithm in ('fedmeta_maml', 'fedavg'):
    out[algorithm] = root / algorithm
    proc = runner.run('programs.train', *TRAIN, f'--algorithm={algorithm}',
                      f'--output_dir={out[algorithm]}')
    assert proc.returncode == 0, proc.stderr[-3000:]
  return out


def _eval_rows(run):
  with open(run / 'eval.csv', newline='') as f:
    return {int(r['round']): {k: float(v) for k, v in r.items()} for r in csv.DictReader(f)}


def _evaluate(runner, run, out, *flags):
  before = snapshot(run)
  proc = runner.run('programs.evaluate', f'--run_dir={run}', f'--output={out}', *flags)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert snapshot(run) == before, 'the run folder changed'
  result = json.loads(out.with_suffix('.json').read_text())
  if '--markdown=false' in flags:   # the scores alone; the table still printed
    assert not out.with_suffix('.md').exists() and '| Setting |' in proc.stdout
  else:
    assert out.with_suffix('.md').read_text().strip() in proc.stdout
  return proc, result


def _assert_row(row, expected, split='test'):
  for key in EXACT:
    assert row[key] == expected[f'{split}_{key}'], (key, row, expected)
  assert row['loss'] == pytest.approx(expected[f'{split}_loss'], rel=1e-6)


def test_own_settings_repeat_the_runs_eval_rows(runner, runs, tmp_path):
  run = runs['fedmeta_maml']
  rows = _eval_rows(run)
  _, result = _evaluate(runner, run, tmp_path / 'r', '--eval_inner_steps=-1,1,0,5')
  assert result['round'] == 4 and result['split'] == 'test'
  by_steps = {r['eval_inner_steps']: r for r in result['rows']}
  assert by_steps[5]['label'] == 'FedMeta(MAML) (eval_inner_steps=5)'
  assert [r['setting'] for r in result['rows']] == [
      f'eval_inner_steps={k}' for k in (-1, 1, 0, 5)]
  _assert_row(by_steps[-1], rows[4])   # -1 = inner_steps = 1, the run's own
  _assert_row(by_steps[1], rows[4])
  assert by_steps[5]['accuracy'] != by_steps[1]['accuracy'] or \
      by_steps[5]['loss'] != by_steps[1]['loss']
  # An earlier checkpoint, the validation clients, no setting: the run's row of round 2.
  _, earlier = _evaluate(runner, run, tmp_path / 'v', '--round=2', '--split=validation')
  assert earlier['round'] == 2 and [r['setting'] for r in earlier['rows']] == ['as run']
  _assert_row(earlier['rows'][0], rows[2], 'validation')


def test_zero_steps_is_the_plain_global_model(runner, runs, tmp_path, tff_context):
  """0 inner steps scores the checkpoint's weights as they are: the plain-TF forward pass of
  the digits MLP (`helpers.mlp_logits`, no Keras or TFF) and a NumPy cross-entropy."""
  del tff_context
  run = runs['fedmeta_maml']
  _, result = _evaluate(runner, run, tmp_path / 'r', '--eval_inner_steps=0')
  cfg = reevaluation.load_run_config(str(run))
  data = experiment.prepare_data(cfg)
  _assert_plain_model_scores(result['rows'][0], run, cfg, data, data.test)


def test_clients_from_scores_every_client_of_another_dataset(runner, runs, tmp_path, tff_context):
  """--clients_from=digits: all 100 clients of the default digits partition (the run holds
  out 10 of its own), each split by the run's support fraction and seed, in place of the
  test clients; checked against the plain-TF forward pass as above."""
  del tff_context
  run = runs['fedmeta_maml']
  _, result = _evaluate(runner, run, tmp_path / 'r', '--eval_inner_steps=0',
                        '--clients_from=digits', '--markdown=false')
  assert result['split'] == 'digits: all 100'
  cfg = reevaluation.load_run_config(str(run))
  data = experiment.prepare_data(cfg)
  others = [protocol.support_query_split(arrays, cfg.support_fraction, cfg.seed, cid)
            for cid, arrays in load_digits().clients.items()]
  assert len(others) == 100 > len(data.test)
  _assert_plain_model_scores(result['rows'][0], run, cfg, data, others)


def test_support_fraction_splits_the_scored_clients_anew(runner, runs, tmp_path, tff_context):
  """--support_fraction=0.5 on the 20% FedAvg run: the same test clients, each split at 50% as a
  50% run splits them (checked against the plain-TF forward pass on those query sets); FedAvg
  trains on all of a client's data, so its label stays plain, while a meta-learner's row says
  at which fraction it was trained."""
  del tff_context
  run = runs['fedavg']
  _, result = _evaluate(runner, run, tmp_path / 'r', '--finetune_epochs=0,1',
                        '--support_fraction=0.5')
  assert (result['support_fraction'], result['trained_support_fraction']) == (0.5, 0.2)
  assert result['split'] == 'test'
  plain, tuned = result['rows']
  assert (plain['label'], tuned['label']) == ('FedAvg', 'FedAvg(Meta)')
  cfg = reevaluation.load_run_config(str(run))
  data = experiment.prepare_data(cfg)
  resplit = [protocol.support_query_split(data.dataset.clients[c.client_id], 0.5, cfg.seed,
                                         c.client_id) for c in data.test]
  assert [len(c.query) for c in resplit] != [len(c.query) for c in data.test]
  _assert_plain_model_scores(plain, run, cfg, data, resplit)
  assert 'test clients, support 50% (trained at 20%)' in reevaluation.markdown(result)
  _, own = _evaluate(runner, run, tmp_path / 'own', '--finetune_epochs=1')
  assert own['rows'][0]['query_examples'] > tuned['query_examples']
  _, maml = _evaluate(runner, runs['fedmeta_maml'], tmp_path / 'm', '--support_fraction=0.5')
  assert maml['rows'][0]['label'] == 'FedMeta(MAML) [trained at 20% support]'


def _assert_plain_model_scores(row, run, cfg, data, clients):
  model = experiment.build_model(cfg, data)
  alg = experiment.build_algorithm(cfg, model, data)
  state, version = asyncio.run(reevaluation.load_state(alg, str(run), None))
  assert version == 4
  weights = alg.params(state)['weights']
  correct = total = loss = 0.0
  per_client = []
  for client in clients:
    ep = client_data.episode(client)
    logits = np.asarray(helpers.mlp_logits([np.asarray(w) for w in weights],
                                           np.asarray(ep['query_x'], np.float32)), np.float64)
    y = np.asarray(ep['query_y'])
    log_p = logits - logits.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    correct += float((logits.argmax(1) == y).sum())
    per_client.append(float((logits.argmax(1) == y).mean()))
    loss -= float(log_p[np.arange(len(y)), y].sum())
    total += len(y)
  assert row['query_examples'] == total and row['clients'] == len(clients)
  assert row['client_ids'] == [c.client_id for c in clients]
  assert row['client_accuracies'] == pytest.approx(per_client, abs=1e-12)
  assert row['accuracy'] == pytest.approx(correct / total, abs=1e-12)
  assert row['loss'] == pytest.approx(loss / total, rel=1e-5)


def test_fedavg_fine_tunes_as_fedavg_meta(runner, runs, tmp_path):
  run = runs['fedavg']
  rows = _eval_rows(run)
  _, result = _evaluate(runner, run, tmp_path / 'r', '--finetune_epochs=0,2')
  zero, two = result['rows']
  assert (zero['method'], two['method']) == ('FedAvg', 'FedAvg(Meta)')   # 0 epochs: FedAvg
  assert (zero['label'], two['label']) == ('FedAvg', 'FedAvg(Meta)')
  _assert_row(zero, rows[4])   # no fine-tuning = FedAvg's own evaluation
  assert (two['accuracy'], two['loss']) != (zero['accuracy'], zero['loss'])


def test_default_output_goes_into_the_run_folder(runner, runs, tmp_path):
  run = tmp_path / 'copy'
  shutil.copytree(runs['fedmeta_maml'], run)
  before = snapshot(run)
  proc = runner.run('programs.evaluate', f'--run_dir={run}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  after = snapshot(run)
  assert {p: c for p, c in after.items() if p in before} == before
  assert json.loads((run / 'reevaluation.json').read_text())['rows'][0]['setting'] == 'as run'
  assert (run / 'reevaluation.md').exists()


def test_bad_inputs(runner, runs, tmp_path):
  maml, fedavg = runs['fedmeta_maml'], runs['fedavg']
  no_checkpoints = tmp_path / 'no_ckpt'
  no_checkpoints.mkdir()
  shutil.copy(maml / 'config.toml', no_checkpoints / 'config.toml')
  out = f'--output={tmp_path / "o"}'
  cases = [
      ([], '--run_dir is required'),
      ([f'--run_dir={tmp_path / "missing"}'], 'is not a folder'),
      ([f'--run_dir={tmp_path}'], 'has no config.toml'),
      ([f'--run_dir={no_checkpoints}', out], 'has no checkpoints/ folder'),
      ([f'--run_dir={maml}', '--round=3', out], 'has no checkpoint of round 3; it has rounds 2, 4'),
      ([f'--run_dir={maml}', '--eval_inner_steps=0,x', out], "--eval_inner_steps: 'x' is not an"),
      ([f'--run_dir={maml}', '--eval_inner_steps=1,1', out], 'repeats a value'),
      ([f'--run_dir={maml}', '--eval_inner_steps=-2', out], 'eval_inner_steps must be >= -1'),
      ([f'--run_dir={maml}', '--eval_inner_lr=0', out], 'inner_lr must be > 0'),
      ([f'--run_dir={maml}', '--finetune_epochs=1', out],
       'has no --finetune_epochs to set; it takes --eval_inner_steps, --eval_inner_lr'),
      ([f'--run_dir={fedavg}', '--eval_inner_steps=1', out], 'it takes --finetune_epochs'),
      ([f'--run_dir={maml}', '--split=known', out], '--split=known: this run has the splits'),
      ([f'--run_dir={maml}', f'--output={maml / "results.json"}'], "would overwrite the run's"),
      ([f'--run_dir={maml}', '--clients_from=nope', out], "unknown dataset 'nope'; known: "),
      ([f'--run_dir={maml}', f'--clients_from=digits:{tmp_path}', out],
       "dataset 'digits' reads no folder; write --clients_from=digits"),
      ([f'--run_dir={maml}', f'--clients_from=leaf_femnist:{tmp_path / "missing"}', out],
       'missing is not a folder'),
      ([f'--run_dir={maml}', '--clients_from=leaf_femnist', out],
       "dataset 'leaf_femnist' is read from a folder; write --clients_from=leaf_femnist:FOLDER"),
      ([f'--run_dir={maml}', f'--clients_from=leaf_femnist:{LEAF_FEMNIST}', out],
       "leaf_femnist has 62 classes of shape (28, 28), but the run's model takes 10 classes of "
       'shape (8, 8)'),
      ([f'--run_dir={maml}', '--split=validation', '--clients_from=digits', out],
       'drop --split'),
      ([f'--run_dir={fedavg}', '--support_fraction=1', out], '--support_fraction=1 is not in (0, 1)'),
      ([f'--run_dir={fedavg}', '--support_fraction=nan', out], 'is not in (0, 1)'),
  ]
  before = snapshot(maml, fedavg)
  for args, expect in cases:
    assert_clean_error(runner.run('programs.evaluate', *args), expect, before)
  assert not (tmp_path / 'o.json').exists()
