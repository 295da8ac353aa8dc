"""Worker pools on loopback: 2 workers give the 1-worker results; dead workers are named."""

import collections
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import helpers
from tests.conftest import REPO
from tff_meta.algorithms import fedmeta
from tff_meta.runtime.pool import (WORKER_LOST_EXIT_CODE, WorkerPool, WorkerUnavailableError,
                                   parse_addresses)
from tff_meta.runtime.workers import WorkerProcess


def _rounds(proc, clients, pool, n=3):
  with tff.framework.get_context_stack().install(pool.context):
    state = proc.initialize()
    history = []
    for r in range(n):
      state, metrics = proc.next(state, clients[r:r + 6])
      history.append(metrics)
  return state, history


@pytest.mark.slow
def test_two_workers_match_one_worker():
  data = helpers.digits_protocol()
  model = helpers.mlp_spec()
  proc = fedmeta.build_fedmeta_process(
      model, variant='maml', inner_lr=0.3, inner_steps=1,
      server_optimizer=tff.learning.optimizers.build_adam(0.01))
  clients = [helpers.episode(c) for c in data.train[:9]]
  with WorkerPool.local(1) as one:
    state1, hist1 = _rounds(proc, clients, one)
  with WorkerPool.local(2) as two:
    assert len(two.addresses) == 2
    state2, hist2 = _rounds(proc, clients, two)
  for a, b in zip(state1['params']['weights'], state2['params']['weights']):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for m1, m2 in zip(hist1, hist2):
    assert m1['num_clients'] == m2['num_clients'] == 6
    np.testing.assert_allclose(m1['loss_sum'], m2['loss_sum'], rtol=1e-5)


@pytest.mark.slow
def test_resident_memory_is_the_owned_workers_vmrss_summed():
  from tff_meta.runtime import workers  # pylint: disable=g-import-not-at-top
  with WorkerPool.local(2) as pool:
    owned = pool._owned  # pylint: disable=protected-access
    each = [w.resident_mb() for w in owned]
    assert all(10 < mb < 5000 for mb in each), each   # a started worker: tens to hundreds of MB
    with open(f'/proc/{owned[0].pid}/status') as f:
      kb = next(int(l.split()[1]) for l in f if l.startswith('VmRSS:'))
    assert each[0] == pytest.approx(kb * 1024 / 1e6, rel=0.2)   # the same counter, read again
    assert pool.resident_mb() == pytest.approx(sum(w.resident_mb() for w in owned), rel=0.2)
    # a pool of workers started elsewhere has no memory of ours to read
    remote = WorkerPool([f'localhost:{owned[0].port}'])
    try:
      assert np.isnan(remote.resident_mb())
    finally:
      remote.close()
    victim = owned[1]
    victim.stop()
    assert np.isnan(victim.resident_mb()) and np.isnan(workers.resident_mb(victim.pid))


@pytest.mark.slow
def test_dead_worker_is_named():
  with WorkerPool.local(2) as pool:
    assert pool.dead_workers(confirm_s=0.5) == []
    victim = pool._owned[1]  # pylint: disable=protected-access
    os.kill(victim.pid, signal.SIGKILL)
    victim.process.wait()
    # Known at once: the probe asks the worker, not the channel's cached state,
    # which gRPC updates some time later (CI saw a round's error come first).
    assert pool.dead_workers(confirm_s=0.5) == [f'localhost:{victim.port}']
    with pytest.raises(WorkerUnavailableError,
                       match=f'localhost:{victim.port} stopped answering.*--workers=localhost:'):
      pool.check('round 7')


def test_unreachable_worker_is_named():
  with pytest.raises(WorkerUnavailableError, match='localhost:9 is not reachable'):
    WorkerPool(['localhost:9'], ready_timeout_s=1)


@pytest.mark.parametrize('text', ['localhost', 'host:port', ''])
def test_bad_addresses(text):
  with pytest.raises(ValueError):
    parse_addresses(text)


@pytest.mark.slow
def test_training_survives_losing_a_worker(tmp_path):
  """Start 2 workers, kill one mid-run, resume with the survivor."""
  out = tmp_path / 'run'
  a, b = WorkerProcess(), WorkerProcess()
  try:
    cmd = [sys.executable, '-m', 'programs.train', '--config=configs/demo/digits.toml',
           '--algorithm=fedmeta_maml', '--rounds=400', '--eval_every=100', '--checkpoint_every=5',
           '--progress=false', f'--output_dir={out}', '--executor=workers']
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    run = subprocess.Popen(cmd + [f'--workers=localhost:{a.port},localhost:{b.port}'], cwd=REPO,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600   # a hang guard only; loaded machines start slowly
    while not (out / 'checkpoints' / 'program_state_10').exists():
      assert run.poll() is None, run.stderr.read()[-2000:]
      assert time.time() < deadline
      time.sleep(0.05)
    b.stop()
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == WORKER_LOST_EXIT_CODE, stderr[-2000:]
    assert f'localhost:{b.port}' in stderr and 'stopped answering' in stderr, stderr[-2000:]
    assert f'--workers=localhost:{a.port}' in stderr
    # The same settings (a run folder refuses fewer rounds than it was started with).
    resumed = subprocess.run(cmd + [f'--workers=localhost:{a.port}'], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert 'Resuming FedMeta(MAML) from round' in resumed.stderr
    with open(out / 'metrics.csv') as f:
      rounds = [int(line.split(',')[0]) for line in f.readlines()[1:]]
    assert rounds == list(range(1, 401))
  finally:
    a.stop()
    b.stop()


def test_a_lost_worker_exits_with_code_3_wherever_it_is_noticed(capsys):
  from tff_meta.program import errors  # pylint: disable=g-import-not-at-top
  from tff_meta.runtime.pool import WORKER_LOST_EXIT_CODE, WorkerLostError
  with pytest.raises(SystemExit) as lost:
    errors.fail(WorkerLostError('TFF worker(s) localhost:1 stopped answering during round 3.'))
  assert lost.value.code == WORKER_LOST_EXIT_CODE
  with pytest.raises(SystemExit) as other:
    errors.fail(WorkerUnavailableError('localhost:9 is not reachable'))
  assert other.value.code == 1
  assert 'error: localhost:9 is not reachable' in capsys.readouterr().err
