"""tff_meta.core.startup: TensorFlow's benign start-up lines are dropped, others kept."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tff_meta.core import startup


def test_filter_drops_only_the_benign_lines():
  text = ('2026 E cuda_dnn.cc:9342] Unable to register cuDNN factory: Attempting ...\n'
          'W something a user should see\n'
          '2026 E cuda_fft.cc:609] Unable to register cuFFT factory: ...\n'
          '2026 E cuda_blas.cc:1518] Unable to register cuBLAS factory: ...\n')
  assert startup.filter_lines(text) == 'W something a user should see\n'
  assert startup.filter_lines('') == ''


def _python(code, **env):
  full = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  full.update(env)
  return subprocess.run([sys.executable, '-c', code], cwd=REPO, env=full, capture_output=True,
                        text=True, timeout=300)


@pytest.mark.slow
def test_a_program_start_prints_no_registration_errors_and_keeps_stderr_working():
  proc = _python('import os, sys\n'
                 'from tff_meta.core import startup\n'
                 'startup.import_tensorflow()\n'
                 'assert "tensorflow" in sys.modules\n'
                 'assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"\n'
                 'print("after", file=sys.stderr)\n')
  assert proc.returncode == 0, proc.stderr
  assert 'Unable to register' not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == 'after'   # fd 2 is the terminal's again


@pytest.mark.slow
def test_other_start_up_lines_still_show():
  # at level 0 TensorFlow logs its INFO lines too: they are not dropped
  proc = _python('from tff_meta.core import startup\nstartup.import_tensorflow()\n',
                 TF_CPP_MIN_LOG_LEVEL='0')
  assert proc.returncode == 0, proc.stderr
  assert 'Unable to register' not in proc.stderr
  assert 'I tensorflow' in proc.stderr
