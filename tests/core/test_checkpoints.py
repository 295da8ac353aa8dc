"""tff_meta/core/checkpoints.check_csv: a metric file checked before a resuming run appends.

Its row checks are run_folder.csv_rows / not_a_number, shared with the run-file readers
(tests/test_run_folder.py); here they raise CheckpointError with a resuming run's fix.
"""

import os

import pytest

from tff_meta.core import run_folder
from tff_meta.core import checkpoints


@pytest.mark.parametrize('content, allow_blank, message', [
    ('round,loss\n1,0.5\n2,nan?\n', True, 'line 3: holds a value that is not a number'),
    ('round,loss\n1,0.5,7\n', True, 'line 2: has a different number of cells'),
    ('round,loss\n1\n', True, 'line 2: has a different number of cells'),
    ('round,loss\n,0.5\n', True, 'line 2: holds a value that is not a number'),  # blank key
    ('round,loss\n1,\n', False, 'line 2: holds a value that is not a number'),   # blank refused
    ('episode,loss\n1,0.5\n', True, "has no 'round' column"),
])
def test_a_damaged_file_is_a_checkpoint_error_with_the_fix(tmp_path, content, allow_blank,
                                                           message):
  path = tmp_path / 'metrics.csv'
  path.write_text(content)
  with pytest.raises(checkpoints.CheckpointError, match=message) as error:
    checkpoints.check_csv(str(path), 'round', allow_blank=allow_blank)
  text = str(error.value)
  assert text.startswith(str(path))
  assert text.endswith(f'delete it and {os.path.join(tmp_path, "checkpoints")} to start over, '
                       'or use a new --output_dir.')
  assert path.read_text() == content   # nothing changed on disk


def test_bytes_that_are_not_utf8(tmp_path):
  path = tmp_path / 'eval.csv'
  path.write_bytes(b'round,accuracy\n1,\xff\n')
  with pytest.raises(checkpoints.CheckpointError, match='eval.csv is not a readable CSV file '
                     r'\(UnicodeDecodeError: .*\); delete it'):
    checkpoints.check_csv(str(path), 'round')


def test_good_files_pass(tmp_path):
  checkpoints.check_csv(str(tmp_path / 'missing.csv'), 'round')   # a new run
  path = tmp_path / 'metrics.csv'
  path.write_text('round,loss,flops\n1,0.5,\n2,0.4,7\n2,0.3,8\n')   # a blank, a resumed round
  checkpoints.check_csv(str(path), 'round')
  path.write_text('episode,rmse\n250,0.93\n')
  checkpoints.check_csv(str(path), 'episode', allow_blank=False)


def test_csv_rows_raises_the_callers_error_with_its_fix(tmp_path):
  class Mine(Exception):
    pass

  path = tmp_path / 'curve.csv'
  path.write_text('episode,rmse\n1,0.9\n2\n')
  with pytest.raises(Mine, match=r'curve.csv, line 3: .* the header \(a damaged row\); do X$'):
    run_folder.csv_rows(str(path), Mine, 'do X')
  path.write_text('episode,rmse\n1,0.9\n')
  assert run_folder.csv_rows(str(path)) == (['episode', 'rmse'], [(2, {'episode': '1',
                                                                       'rmse': '0.9'})])
  assert str(run_folder.not_a_number('f.csv', 4, Mine, 'do Y')) == (
      'f.csv, line 4: holds a value that is not a number (a damaged row); do Y')
