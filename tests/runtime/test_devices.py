"""--client_devices: GPUs for the workers we start, through their CUDA_VISIBLE_DEVICES."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tff_meta.program import executor
from tff_meta.runtime.pool import WorkerPool
from tff_meta.runtime.workers import WorkerProcess


def _envs(spec, workers, gpus, environ=None, gpu_support=True):
  return executor.worker_envs(spec, workers, gpu_count=lambda: gpus,
                              has_gpu_support=lambda: gpu_support, environ=environ or {})


def _visible(envs):
  return [e['CUDA_VISIBLE_DEVICES'] for e in envs]


def _environ_of(pid):
  with open(f'/proc/{pid}/environ', 'rb') as f:
    return dict(item.split('=', 1) for item in f.read().decode().split('\0') if '=' in item)


def test_unset_keeps_the_inherited_devices():
  assert _envs(None, 2, gpus=4) is None
  assert _envs('', 1, gpus=4) is None


def test_no_gpu_ignores_the_flag_with_a_note(capsys):
  for spec in ('gpu', '0', '0,1'):
    assert _envs(spec, 2, gpus=0) is None
    assert f'TensorFlow sees no GPU here, so --client_devices={spec} is ignored' in (
        capsys.readouterr().err)


def test_gpus_are_spread_over_the_workers(capsys):
  assert _visible(_envs('gpu', 1, gpus=2)) == ['0,1']
  assert _visible(_envs('gpu', 2, gpus=2)) == ['0', '1']
  assert _visible(_envs('gpu', 2, gpus=4)) == ['0,2', '1,3']
  assert _visible(_envs('gpu', 3, gpus=2)) == ['0', '1', '0']
  assert _visible(_envs('1', 2, gpus=2)) == ['1', '1']
  envs = _envs('0', 1, gpus=1)
  assert envs == [{'CUDA_VISIBLE_DEVICES': '0', 'TF_CPP_MIN_LOG_LEVEL': '0'}]
  assert 'worker 1 CUDA_VISIBLE_DEVICES=0' in capsys.readouterr().err


def test_indices_follow_an_inherited_cuda_visible_devices():
  # This process sees physical GPUs 2 and 5 as TensorFlow's GPU:0 and GPU:1.
  assert _visible(_envs('1', 1, gpus=2, environ={'CUDA_VISIBLE_DEVICES': '2,5'})) == ['5']
  assert _visible(_envs('gpu', 2, gpus=2, environ={'CUDA_VISIBLE_DEVICES': '2,5'})) == ['2', '5']


def test_cpu_hides_the_gpus():
  assert _visible(_envs('cpu', 2, gpus=0)) == ['-1', '-1']
  assert _visible(_envs('cpu', 1, gpus=8)) == ['-1']


@pytest.mark.parametrize('spec', ['tpu', '0,0', '-1', 'gpu0'])
def test_bad_specs(spec):
  with pytest.raises(ValueError, match='--client_devices'):
    _envs(spec, 1, gpus=2)


def test_an_index_beyond_the_visible_gpus():
  with pytest.raises(ValueError, match='sees 2 GPU'):
    _envs('2', 1, gpus=2)


def test_a_cpu_only_worker_binary_is_reported(capsys):
  _envs('gpu', 1, gpus=1, gpu_support=False)
  assert 'no GPU support built in' in capsys.readouterr().err


def test_gpu_support_detection(tmp_path):
  with_gpu, without = tmp_path / 'gpu_bin', tmp_path / 'cpu_bin'
  with_gpu.write_bytes(b'\0' * 100 + b'tensorflow/core/common_runtime/gpu/gpu_device.cc' + b'\0')
  without.write_bytes(b'\0' * 100 + b'tensorflow/core/common_runtime/gpu/gpu_util.cc' + b'\0')
  assert executor.worker_binary_has_gpu_support(str(with_gpu))
  assert not executor.worker_binary_has_gpu_support(str(without))
  assert isinstance(executor.worker_binary_has_gpu_support(), bool)   # the installed worker


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
def test_workers_get_their_env():
  with WorkerProcess(env={'CUDA_VISIBLE_DEVICES': '-1', 'TFF_META_TEST': 'a'}) as worker:
    env = _environ_of(worker.pid)
    assert env['CUDA_VISIBLE_DEVICES'] == '-1' and env['TFF_META_TEST'] == 'a'
    assert env.get('PATH') == os.environ.get('PATH')   # on top of ours, not instead
  with WorkerPool.local(2, env=[{'CUDA_VISIBLE_DEVICES': '0'}, {'CUDA_VISIBLE_DEVICES': '1'}]) as pool:
    assert [_environ_of(w.pid)['CUDA_VISIBLE_DEVICES'] for w in pool._owned] == ['0', '1']  # pylint: disable=protected-access
  with pytest.raises(ValueError, match='2 entries for 3 workers'):
    WorkerPool.local(3, env=[{}, {}])


@pytest.mark.slow
def test_cpu_only_machine_prints_the_note_and_trains(tmp_path):
  if executor.visible_gpu_count():
    pytest.skip('a GPU is visible: this checks the CPU-only path')
  out = tmp_path / 'run'
  run = subprocess.run(
      [sys.executable, '-m', 'programs.train', '--config=configs/demo/digits.toml',
       '--algorithm=fedavg', '--rounds=2', '--eval_every=2', '--checkpoint_every=2',
       '--progress=false', f'--output_dir={out}', '--client_devices=gpu'],
      cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'), capture_output=True, text=True,
      timeout=300)
  assert run.returncode == 0, run.stderr[-2000:]
  assert 'note: TensorFlow sees no GPU here, so --client_devices=gpu is ignored' in run.stderr
  assert (out / 'results.json').exists()


def test_local_workers_start_with_the_bounded_malloc_arenas(tff_worker):
  # benchmarks/memory.py: without it the worker's RSS grows ~50% in 300 rounds.
  if 'MALLOC_ARENA_MAX' not in os.environ:
    assert _environ_of(tff_worker.pid)['MALLOC_ARENA_MAX'] == '2'
