"""Results stay those of fd34688, the commit before the execution plan (issue 67), a few rounds
or episodes each: the demo (configs/demo/digits.toml, FedAvg and FedMeta(MAML)), the FEMNIST
FedMeta(MAML) Table 2 cell (configs/fedmeta/table2_femnist_p20_maml.toml), few-round learning
(configs/fewround/femnist62_5way_iid.toml) and recommendation
(configs/recommend/movielens_p80.toml).

Each case (tests/same_results.py) runs `programs.train` at this checkout and every kept value
is compared with tests/fixtures/same_results/<case>/ (README.md there: the commands, the
commit). The FEMNIST cell runs the paper's CNN, not `--model=mlp`: 3 clients for 4 rounds
compile and run in the case's time.
"""

import os
import tempfile

import pytest

from tests import same_results
from tests.conftest import FIXTURES

GOLDEN_LIMIT_BYTES = 100_000


@pytest.mark.slow
@pytest.mark.parametrize('name', list(same_results.BY_NAME))
def test_results_equal_the_golden_files(name, tmp_path):
  case = same_results.BY_NAME[name]
  actual = same_results.run_case(case, same_results.REPO, str(tmp_path), FIXTURES)
  found = same_results.differences(same_results.golden(case), actual, name)
  assert not found, f'values that differ ({len(found)}):\n' + '\n'.join(found[:30])


def test_golden_files_are_small_and_complete():
  sizes = {}
  for case in same_results.CASES:
    for rel in case.files:
      sizes[f'{case.name}/{rel}'] = os.path.getsize(os.path.join(same_results.GOLDEN, case.name, rel))
  assert sum(sizes.values()) < GOLDEN_LIMIT_BYTES, sizes
  for case in same_results.CASES:   # no run's own folder: paths are <work> and <fixtures>
    assert tempfile.gettempdir() not in repr(same_results.golden(case)), case.name


def test_kept_values_drop_timing_and_paths(tmp_path):
  (tmp_path / 'm.csv').write_text(f'round,loss,round_seconds,path\n1,0.5,3.2,{tmp_path}/x\n')
  (tmp_path / 'r.json').write_text(
      '{"summary": {"accuracy": 0.25, "train_seconds": 9.0}, "config": "name = 1", '
      '"rows": [{"seconds": 1, "rmse": 0.9}]}')
  assert same_results.kept(str(tmp_path / 'm.csv'), {str(tmp_path): '<work>'}) == {
      'columns': ['round', 'loss', 'path'], 'rows': [{'round': '1', 'loss': '0.5', 'path': '<work>/x'}]}
  assert same_results.kept(str(tmp_path / 'r.json')) == {
      'summary': {'accuracy': 0.25}, 'rows': [{'rmse': 0.9}]}
  # A row with more or fewer cells than its header is an error, not a shorter row.
  for row in ('1,0.5,3.2,x,999', '1,0.5'):
    (tmp_path / 'bad.csv').write_text(f'round,loss,round_seconds,path\n{row}\n')
    with pytest.raises(ValueError, match='bad.csv, line 2: .* cells under a header of 4'):
      same_results.kept(str(tmp_path / 'bad.csv'))


def test_differences_tolerate_a_relative_1e_6_only():
  def table(*losses, columns=('round', 'loss')):
    return {'columns': list(columns),
            'rows': [dict(zip(columns, (str(r), loss))) for r, loss in enumerate(losses, 1)]}
  assert same_results.differences(table('0.5', '0.25'), table('0.5000004', '0.25')) == []
  assert same_results.differences(table('0.5', '0.25'), table('0.5001', '0.25'), 'm') == [
      "m/rows[0]/loss: '0.5' became '0.5001' (relative 2.00e-04)"]
  assert same_results.differences(table('0.5', '0.25'), table('0.5', '0.25', columns=('round',)))
  assert same_results.differences(table('0.5', '0.25'), table('0.5'))
  assert same_results.differences({'n': 4, 'm': 'MAML'}, {'n': 5, 'm': 'MAML'}) == [
      '/n: 4 became 5']
  assert same_results.differences({'a': 1.0}, {'a': 1}) == []      # same value, int or float
  assert same_results.differences({'a': 'x'}, {'a': 'y', 'b': 1})
