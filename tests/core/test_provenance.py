"""tff_meta.core.provenance: the code version of a checkout, and a run folder's start rows."""

import subprocess

import pytest

from tff_meta.core import provenance


def _git(repo, *args):
  subprocess.run(['git', '-C', str(repo), '-c', 'user.name=t', '-c', 'user.email=t@example.com',
                  *args], check=True, capture_output=True)


def _one_commit(repo, name):
  """A git checkout at `repo` with one commit of file `name`."""
  repo.mkdir()
  _git(repo, 'init', '-q')
  (repo / name).write_text('x = 1\n')
  _git(repo, 'add', name)
  _git(repo, 'commit', '-q', '-m', 'first')
  return repo


@pytest.fixture
def checkout(tmp_path, monkeypatch):
  repo = _one_commit(tmp_path / 'repo', 'a.py')
  monkeypatch.setattr(provenance, '_REPO', str(repo))
  provenance.code_version.cache_clear()
  yield repo
  provenance.code_version.cache_clear()


def test_code_version_is_the_commit_and_says_dirty(checkout):
  head = subprocess.run(['git', '-C', str(checkout), 'rev-parse', 'HEAD'], check=True,
                        capture_output=True, text=True).stdout.strip()
  assert provenance.code_version() == head[:12]
  (checkout / 'untracked.txt').write_text('runs/ are not code\n')   # untracked: still clean
  provenance.code_version.cache_clear()
  assert provenance.code_version() == head[:12]
  (checkout / 'a.py').write_text('x = 2\n')
  provenance.code_version.cache_clear()
  assert provenance.code_version() == head[:12] + '+dirty'


def test_code_version_of_another_checkout(checkout, tmp_path):
  """`code_version(folder)` names that checkout's commit (a benchmark measuring another
  worktree's code), not this package's."""
  other = _one_commit(tmp_path / 'other', 'b.py')
  head = subprocess.run(['git', '-C', str(other), 'rev-parse', 'HEAD'], check=True,
                        capture_output=True, text=True).stdout.strip()
  assert provenance.code_version(str(other)) == head[:12] != provenance.code_version()
  (other / 'b.py').write_text('y = 2\n')
  provenance.code_version.cache_clear()
  assert provenance.code_version(str(other)) == head[:12] + '+dirty'
  assert '+dirty' not in provenance.code_version()   # `checkout` itself is clean


def test_outside_a_checkout_the_version_is_unknown(tmp_path, monkeypatch):
  monkeypatch.setattr(provenance, '_REPO', str(tmp_path))
  monkeypatch.setenv('GIT_CEILING_DIRECTORIES', str(tmp_path.parent))
  provenance.code_version.cache_clear()
  try:
    assert provenance.code_version() == provenance.UNKNOWN
  finally:
    provenance.code_version.cache_clear()


def test_rows_accumulate_and_describe_a_resumed_run(tmp_path, monkeypatch):
  folder = str(tmp_path / 'run')
  assert provenance.read(folder) == [] and provenance.describe(folder) == 'code not recorded'
  monkeypatch.setattr(provenance, 'code_version', lambda: 'aaaaaaaaaaaa')
  provenance.record(folder, 0)
  assert provenance.describe(folder) == 'code aaaaaaaaaaaa'
  provenance.record(folder, 750)   # the same code resumes: still one version
  monkeypatch.setattr(provenance, 'code_version', lambda: 'bbbbbbbbbbbb+dirty')
  provenance.record(folder, 1350)
  rows = provenance.read(folder)
  assert [r['start'] for r in rows] == ['0', '750', '1350']
  assert all(r['time'].endswith('Z') and r['command'] for r in rows)
  assert provenance.describe(folder) == ('code aaaaaaaaaaaa (from the start), '
                                         'bbbbbbbbbbbb+dirty (after round 1350)')
  provenance.record(folder)   # a program that does not know its start
  assert provenance.read(folder)[-1]['start'] == ''


@pytest.mark.parametrize('content', [b'\xff\xfe\x00', b'', b'time,code_version,start,command\n'])
def test_a_damaged_provenance_file_is_not_called_unrecorded(tmp_path, content):
  (tmp_path / provenance.PROVENANCE_FILE).write_bytes(content)
  assert provenance.read(str(tmp_path)) == []
  assert provenance.describe(str(tmp_path)) == (
      f'code unknown ({provenance.PROVENANCE_FILE} has no readable row)')


def test_rows_name_the_machine_and_old_files_still_read(tmp_path, monkeypatch):
  cpuinfo = tmp_path / 'cpuinfo'
  cpuinfo.write_text('processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu avx2 sse4_2 fma\n'
                     'processor\t: 1\nmodel name\t: Other CPU\nflags\t\t: fpu\n')
  text = provenance.machine(str(cpuinfo))
  assert text.startswith('Test CPU 9000 x') and '; sse4_2 avx2 fma; flags ' in text
  assert 'tensorflow ' in text
  other = tmp_path / 'cpuinfo2'
  other.write_text('model name\t: Test CPU 9000\nflags\t\t: fpu avx2 sse4_2 fma avx512f\n')
  digest = lambda t: t.split('flags ')[1].split(')')[0]
  assert digest(provenance.machine(str(other))) != digest(text)   # one more flag, a new hash
  assert 'no SIMD flags read' in provenance.machine(str(tmp_path / 'missing'))
  folder = tmp_path / 'run'
  folder.mkdir()
  (folder / provenance.PROVENANCE_FILE).write_text(   # written before the machine column
      'time,code_version,start,command\n2026-01-01T00:00:00Z,aaaaaaaaaaaa,0,train.py\n')
  monkeypatch.setattr(provenance, 'machine', lambda: 'Test CPU 9000 x2')
  provenance.record(str(folder), 10)
  rows = provenance.read(str(folder))
  assert [r['machine'] for r in rows] == ['', 'Test CPU 9000 x2']
  assert rows[0]['command'] == 'train.py'
