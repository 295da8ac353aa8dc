"""docs/runs keeps every committed result traceable: each run folder names the code that wrote it."""

import os

from tests.conftest import REPO
from tff_meta import provenance
from tff_meta.run_folder import PROVENANCE_FILE, RESULTS_FILE

RUNS = os.path.join(REPO, 'docs', 'runs')


def _result_folders(root: str):
  return sorted(d for d, _, names in os.walk(root) if RESULTS_FILE in names)


def test_every_committed_run_folder_has_a_provenance_file():
  folders = _result_folders(RUNS)
  assert len(folders) > 100, 'docs/runs lost its run folders'
  missing = [os.path.relpath(d, REPO) for d in folders
             if not os.path.exists(os.path.join(d, PROVENANCE_FILE))]
  assert not missing, f'run folders without {PROVENANCE_FILE}: {missing}'
  unreadable = [os.path.relpath(d, REPO) for d in folders if not provenance.read(d)]
  assert not unreadable, f'{PROVENANCE_FILE} without a readable row: {unreadable}'


def test_the_check_sees_a_folder_without_provenance(tmp_path):
  (tmp_path / 'a' / 'b').mkdir(parents=True)
  (tmp_path / 'a' / 'b' / RESULTS_FILE).write_text('{}')
  (tmp_path / 'c').mkdir()
  (tmp_path / 'c' / RESULTS_FILE).write_text('{}')
  (tmp_path / 'c' / PROVENANCE_FILE).write_text('time,code_version\n')
  assert _result_folders(str(tmp_path)) == [str(tmp_path / 'a' / 'b'), str(tmp_path / 'c')]
  assert not provenance.read(str(tmp_path / 'c'))
