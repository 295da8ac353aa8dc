"""The shared ending of programs (cli.guard) and atomic writes (files), in process."""

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tff_meta.core import cli, files
from tests.conftest import REPO
from tests.helpers import folder_held_by_another_run, sigterm_after_first_line


class BadInput(ValueError):
  pass


def _end(fn, capsys, monkeypatch, tmp_path, env=None):
  """(exit code, stderr) of `fn` run as a program's main through cli.guard."""
  monkeypatch.setattr('tempfile.tempdir', str(tmp_path))
  for k, v in (env or {}).items():
    monkeypatch.setenv(k, v)
  with pytest.raises(SystemExit) as e:
    cli.guard(fn, (BadInput,))(['prog'])
  return e.value.code, capsys.readouterr().err


def _raise(error):
  def main(argv):
    del argv
    raise error
  return main


def test_user_error_is_one_line(capsys, monkeypatch, tmp_path):
  code, err = _end(_raise(BadInput('x.toml: bad\nvalue   here')), capsys, monkeypatch, tmp_path)
  assert code == 1 and err == 'error: x.toml: bad value here\n'


def test_file_system_error_names_the_path(capsys, monkeypatch, tmp_path):
  blocker = tmp_path / 'f'
  blocker.write_text('x')
  code, err = _end(lambda argv: os.makedirs(blocker / 'out'), capsys, monkeypatch, tmp_path)
  assert code == 1 and err.startswith(f'error: {blocker}/out: ') and 'Traceback' not in err


def test_interrupt(capsys, monkeypatch, tmp_path):
  code, err = _end(_raise(KeyboardInterrupt()), capsys, monkeypatch, tmp_path)
  assert code == cli.INTERRUPTED_EXIT_CODE and err.startswith('error: interrupted')


def test_an_error_after_sigterm_is_reported_as_the_termination_once(capsys, monkeypatch,
                                                                     tmp_path):
  """The stopped workers' error on the way out (here a user error) is not what ended the run."""
  import threading   # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(cli, 'TERMINATING', threading.Event())
  monkeypatch.setattr(cli, '_TERMINATION_REPORTED', threading.Event())
  cli.TERMINATING.set()
  code, err = _end(_raise(BadInput('TFF worker(s) stopped answering')), capsys, monkeypatch,
                   tmp_path)
  assert code == cli.TERMINATED_EXIT_CODE and err.startswith('error: terminated (SIGTERM)')
  assert err.count('\n') == 1
  with pytest.raises(SystemExit) as e:   # the SIGTERM handler's own report comes after: silent
    cli.fail('terminated (SIGTERM).', cli.TERMINATED_EXIT_CODE)
  assert e.value.code == cli.TERMINATED_EXIT_CODE and capsys.readouterr().err == ''


def test_a_bug_is_an_internal_error_with_its_traceback_saved(capsys, monkeypatch, tmp_path):
  code, err = _end(_raise(ZeroDivisionError('boom')), capsys, monkeypatch, tmp_path)
  assert code == cli.INTERNAL_ERROR_EXIT_CODE
  assert err.startswith('error: internal error (ZeroDivisionError: boom)')
  assert 'Traceback' not in err
  saved = [p for p in tmp_path.iterdir() if p.name.startswith('tff_meta_error_')]
  assert len(saved) == 1 and str(saved[0]) in err
  text = saved[0].read_text()
  assert 'Traceback' in text and 'ZeroDivisionError: boom' in text and 'raise error' in text


def test_a_bug_shows_its_traceback_on_request(capsys, monkeypatch, tmp_path):
  code, err = _end(_raise(ZeroDivisionError('boom')), capsys, monkeypatch, tmp_path,
                   env={cli.TRACEBACK_ENV: '1'})
  assert code == cli.INTERNAL_ERROR_EXIT_CODE and 'Traceback' in err
  assert err.splitlines()[-1].startswith('error: internal error')


# --------------------------------------------------------------------------- the machine's failures

def _claimed_write(folder, name='results.json'):
  """A program's main that claims `folder` and writes a file into it."""
  def main(argv):
    del argv
    files.claim_folder(folder)
    files.write_json(os.path.join(folder, name), {'x': 1})
  return main


def _assert_environment(code, err):
  assert code == 1 and err.startswith('error: ') and err.count('\n') == 1, err
  assert 'internal error' not in err and 'This is a bug' not in err and 'Traceback' not in err


def test_full_disk_without_a_path_names_the_output_folder(capsys, monkeypatch, tmp_path):
  out = tmp_path / 'run'
  def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))   # as a write or fsync raises it
  monkeypatch.setattr(os, 'fsync', full)
  code, err = _end(_claimed_write(str(out)), capsys, monkeypatch, tmp_path)
  _assert_environment(code, err)
  assert err.startswith(f'error: output folder {os.path.realpath(out)}: No space left on device; '
                        'the disk is full; free space, then rerun the same command: it resumes '
                        'from the last checkpoint')
  assert not [p for p in os.listdir(out) if p.endswith('.tmp')]   # the atomic write cleaned up


def test_tensorflow_full_disk_is_named_as_a_full_disk(capsys, monkeypatch, tmp_path):
  """TensorFlow's own error for a full disk (a real write to /dev/full), and the same error as a
  checkpoint save inside the output folder raises it, wrapped by the caller."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  def write_full(argv):
    del argv
    tf.io.write_file('/dev/full', 'x' * 100000)
  code, err = _end(write_full, capsys, monkeypatch, tmp_path)
  _assert_environment(code, err)
  assert err.startswith('error: /dev/full: No space left on device (ResourceExhaustedError); '
                        'the disk is full')
  out = tmp_path / 'run'
  files.claim_folder(out)
  saved = os.path.join(out, 'checkpoints', 'program_state_3_temp1', 'variables', 'v.data')
  def checkpoint(argv):
    del argv
    try:
      raise tf.errors.ResourceExhaustedError(
          None, None, f'{{{{function_node __wrapped__SaveV2}}}} {saved}; No space left on device '
          '[Op:SaveV2]')
    except tf.errors.ResourceExhaustedError as e:
      raise RuntimeError('saving the program state failed') from e
  code, err = _end(checkpoint, capsys, monkeypatch, tmp_path)
  _assert_environment(code, err)
  assert err.startswith(f'error: {saved} (output folder {os.path.realpath(out)}): No space left '
                        'on device (ResourceExhaustedError); the disk is full')


@pytest.mark.parametrize('error', [
    MemoryError(), RuntimeError('OOM when allocating tensor with shape[64,1024,1024] and type '
                                'float on /job:localhost/replica:0/task:0/device:CPU:0'),
    RuntimeError('std::bad_alloc')])
def test_memory_that_ran_out_is_named(capsys, monkeypatch, tmp_path, error):
  code, err = _end(_raise(error), capsys, monkeypatch, tmp_path)
  _assert_environment(code, err)
  assert err.startswith('error: out of memory (') and 'more memory' in err
  assert '--max_concurrent_calls' in err and 'resumes from the last checkpoint' in err


def test_tensorflow_out_of_memory_is_named(capsys, monkeypatch, tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  code, err = _end(_raise(tf.errors.ResourceExhaustedError(
      None, None, 'OOM when allocating tensor with shape[1000000,1000000]')), capsys, monkeypatch,
      tmp_path)
  _assert_environment(code, err)
  assert err.startswith('error: out of memory (ResourceExhaustedError: OOM when allocating')


@pytest.mark.parametrize('code_, fix', [
    (errno.EROFS, 'the file system is read-only; give an --output_dir on a writable disk'),
    (errno.EACCES, 'you lack the permission; fix the permissions of that path'),
    (errno.EDQUOT, 'your disk quota is used up')])
def test_read_only_and_forbidden_folders_name_the_fix(capsys, monkeypatch, tmp_path, code_, fix):
  out = tmp_path / 'run'
  def refuse(*args, **kwargs):
    raise OSError(code_, os.strerror(code_), args[0] if args else None)
  monkeypatch.setattr('tempfile.mkstemp', lambda dir, **k: refuse(os.path.join(dir, 'x.tmp')))
  code, err = _end(_claimed_write(str(out)), capsys, monkeypatch, tmp_path)
  _assert_environment(code, err)
  assert err.startswith(f'error: {out}/x.tmp (output folder {os.path.realpath(out)}): '
                        f'{os.strerror(code_)}; {fix}')


def test_a_folder_the_system_refuses_even_to_root(capsys, monkeypatch, tmp_path):
  """A real refusal that holds as root too: sysfs creates no folders (EPERM as root, EACCES
  otherwise)."""
  if not os.path.isdir('/sys/kernel'):
    pytest.skip('no sysfs mounted at /sys')
  code, err = _end(lambda argv: files.claim_folder('/sys/tff_meta_run'), capsys, monkeypatch,
                   tmp_path)
  _assert_environment(code, err)
  assert err.startswith('error: /sys/tff_meta_run: ') and 'you lack the permission' in err


def test_a_real_read_only_folder(capsys, monkeypatch, tmp_path):
  out = tmp_path / 'run'
  out.mkdir()
  out.chmod(0o555)
  try:
    probe = out / 'probe'
    try:
      probe.write_text('x')
    except PermissionError:
      pass
    else:
      probe.unlink()
      pytest.skip('running as root: the folder\'s mode does not stop writes (the sysfs and '
                  'patched-error tests cover this case)')
    code, err = _end(_claimed_write(str(out)), capsys, monkeypatch, tmp_path)
    _assert_environment(code, err)
    assert f'{out}' in err and 'you lack the permission' in err
  finally:
    out.chmod(0o755)


def test_stray_arguments_are_refused_before_main_runs(capsys, monkeypatch, tmp_path):
  calls = []
  monkeypatch.setattr('tempfile.tempdir', str(tmp_path))
  with pytest.raises(SystemExit) as e:
    cli.guard(calls.append)(['prog', 'extra', 'more'])
  err = capsys.readouterr().err
  assert e.value.code == 1 and not calls
  assert err == "error: Unexpected arguments: ['extra', 'more'] (--helpshort lists the flags).\n"


def test_main_runs_with_quiet_logs(monkeypatch):
  monkeypatch.delenv('TF_CPP_MIN_LOG_LEVEL', raising=False)
  seen = []
  cli.guard(lambda argv: seen.append(os.environ.get('TF_CPP_MIN_LOG_LEVEL')))(['prog'])
  assert seen == ['2']


def test_normal_exit_passes_through(capsys, monkeypatch, tmp_path):
  assert cli.guard(lambda argv: 0)(['prog']) == 0
  code, _ = _end(_raise(SystemExit(4)), capsys, monkeypatch, tmp_path)
  assert code == 4


@pytest.mark.slow
def test_sigterm_stops_the_workers_and_ends_a_program_whose_shutdown_hangs():
  """SIGTERM in a program: its TFF workers stopped, one error line with the resume hint, exit 143,
  even when a thread (here one that never ends, as a TFF call left in flight can) would keep
  interpreter shutdown waiting forever (then cli's timer ends it after TERM_GRACE_S)."""
  script = textwrap.dedent("""
      import threading, time
      from tff_meta.core import cli
      from tff_meta.runtime import workers
      cli.TERM_GRACE_S = 1.0
      def main(argv):
        w = workers.WorkerProcess()
        threading.Thread(target=threading.Event().wait).start()   # not a daemon; never ends
        print(w.pid, flush=True)
        time.sleep(120)
      cli.run(main)
  """)
  first, code, err = sigterm_after_first_line(script, cwd=REPO)
  worker_pid = int(first)
  assert code == cli.TERMINATED_EXIT_CODE == 143
  assert [line for line in err.splitlines() if line.startswith('error:')] == [
      'error: terminated (SIGTERM). Rerunning the same command resumes from the last checkpoint '
      '(where the program keeps checkpoints).']
  assert 'Traceback' not in err
  try:
    os.kill(worker_pid, 0)   # stopped and reaped by the program (its child) before it ended
    raise AssertionError(f'worker {worker_pid} outlived its program')
  except ProcessLookupError:
    pass


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path):
  path = tmp_path / 'results.json'
  files.write_json(path, {'a': 1})
  with pytest.raises(KeyboardInterrupt):
    with files.atomic_open(path) as f:
      f.write('{"a": 2, "half')
      raise KeyboardInterrupt   # a kill mid-write
  assert json.loads(path.read_text()) == {'a': 1}
  assert os.listdir(tmp_path) == ['results.json']   # no temporary file left behind
  files.write_text(path, 'new')
  assert path.read_text() == 'new' and os.listdir(tmp_path) == ['results.json']


def test_atomic_write_has_the_usual_permissions(tmp_path):
  files.write_text(tmp_path / 'a', 'x')
  with open(tmp_path / 'b', 'w') as f:
    f.write('x')
  assert os.stat(tmp_path / 'a').st_mode == os.stat(tmp_path / 'b').st_mode


def test_require_folder(tmp_path):
  files.require_folder(tmp_path)
  files.require_folder(tmp_path / 'missing')
  (tmp_path / 'f').write_text('x')
  with pytest.raises(NotADirectoryError) as e:
    files.require_folder(tmp_path / 'f')
  assert e.value.filename == str(tmp_path / 'f')



PROBE = """
import sys
from tff_meta.core import cli, files
try:
  files.claim_folder(sys.argv[1])
except OSError as e:
  print(e.errno, cli.describe_os_error(e))
"""


def test_claim_folder_refuses_a_second_writer_until_the_first_ends(tmp_path):
  out = tmp_path / 'a' / 'run'
  with folder_held_by_another_run(out) as holder_pid:
    assert out.is_dir() and (out / files.LOCK_FILE).read_text() == f'{holder_pid}\n'
    line = subprocess.run([sys.executable, '-c', PROBE, str(out)], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout
    assert line == (f'{errno.EBUSY} {out}: another run (PID {holder_pid}) is writing this output '
                    'folder; wait for it to end (the same command then resumes where it stopped) '
                    'or give another output folder.\n')
  files.claim_folder(out)   # the kernel dropped the killed holder's lock
  files.claim_folder(out)   # held by this process already: a no-op
  assert (out / files.LOCK_FILE).read_text() == f'{os.getpid()}\n'
