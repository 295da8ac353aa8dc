"""Tests for programs/data.py (run as a subprocess) and tff_meta.data.stats."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tff_meta.data import load_dataset
from tff_meta.data import stats
from tff_meta.data.types import ClientArrays, FederatedDataset

pytestmark = pytest.mark.slow   # runs programs as subprocesses

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'programs.data', *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=120)


def test_table_for_digits():
  out = _run('--dataset=digits')
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  assert lines[0].startswith('digits: scikit-learn digits')
  assert 'samples/client mean' in lines[1]
  row = lines[3].split()
  # dataset clients samples classes / declared mean stdev min max
  assert row == ['digits', '100', '1,797', '10', '/', '10', '18.0', '0.5', '2', '2']
  assert lines[4] == '0 of 100 clients left out (empty); 100 kept.'


def test_json_with_options_and_filter_matches_direct_computation():
  out = _run('--dataset=digits', '--data_option', 'num_clients=40',
             '--data_option=labels_per_client=5', '--data_option', 'seed=3',
             '--min_samples=45', '--format=json')
  assert out.returncode == 0, out.stderr
  got = json.loads(out.stdout)
  ds = load_dataset('digits', num_clients=40, labels_per_client=5, seed=3)
  sizes = np.array([len(c) for c in ds.clients.values()])
  kept = sizes[sizes >= 45]
  assert 0 < len(kept) < 40
  assert got['clients'] == len(kept) and got['filtered'] == 40 - len(kept)
  assert got['samples'] == kept.sum()
  assert got['samples_mean'] == pytest.approx(kept.mean())
  assert got['samples_stdev'] == pytest.approx(kept.std())
  assert got['classes'] == 10 and got['classes_min'] == got['classes_max'] == 5


def test_errors_exit_nonzero_with_message():
  out = _run('--dataset=nope')
  assert out.returncode != 0 and 'Unknown dataset' in out.stderr and 'digits' in out.stderr
  out = _run('--dataset=digits', '--data_option', 'num_clients')
  assert out.returncode != 0 and 'key=value' in out.stderr
  out = _run('--dataset=mnist', '--data_option', 'data_dir=/nonexistent/mnist')
  assert out.returncode != 0 and '/nonexistent/mnist' in out.stderr


def test_stats_counts_present_classes_and_skips_empty_clients():
  clients = {
      'a': ClientArrays(np.zeros((4, 1)), np.array([0, 0, 1, 5], np.int32)),
      'b': ClientArrays(np.zeros((2, 1)), np.array([1, 1], np.int32)),
      'c': ClientArrays(np.zeros((0, 1)), np.zeros((0,), np.int32)),
  }
  s = stats.dataset_stats(FederatedDataset('t', clients, 8, (1,)))
  assert (s.clients, s.samples, s.classes, s.num_classes) == (2, 6, 3, 8)
  assert (s.samples_mean, s.samples_stdev, s.classes_min, s.classes_max) == (3.0, 1.0, 1, 3)
  assert s.filtered == 1
  f = stats.dataset_stats(FederatedDataset('t', clients, 8, (1,)), min_samples=3)
  assert (f.clients, f.samples, f.classes, f.filtered) == (1, 4, 3, 2)
  table = stats.format_table([s, f])
  assert len(table.splitlines()) == 4 and 'classes/client min' in table


def _write_ml100k(folder):
  """Three users (one without ratings) and three movies in GroupLens' ml-100k format."""
  folder.mkdir()
  (folder / 'u.user').write_text('1|24|M|technician|85711\n2|53|F|other|94043\n'
                                 '3|23|M|writer|32067\n')
  flags = '|'.join('0' * 19)
  (folder / 'u.item').write_text(''.join(f'{i}|Movie {i} (1995)|01-Jan-1995||http://x|{flags}\n'
                                         for i in (1, 2, 3)))
  ratings = [(1, 1, 5, 300), (1, 2, 3, 100), (2, 3, 4, 50), (1, 3, 1, 200), (2, 1, 2, 10),
             (1, 1, 4, 400), (2, 2, 5, 60)]
  (folder / 'u.data').write_text(''.join('\t'.join(map(str, r)) + '\n' for r in ratings))
  return str(folder)


def test_movielens_per_user_table_and_json(tmp_path):
  folder = _write_ml100k(tmp_path / 'ml-100k')
  out = _run('--dataset=movielens', f'--data_option=path={folder}')
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  assert lines[0].startswith('movielens100k: MovieLens-100k from')
  assert 'ratings/user mean' in lines[1] and 'rating mean' in lines[1]
  # dataset users ratings items rated / catalogue, ratings/user mean stdev min max, rating
  assert lines[3].split() == ['movielens100k', '2', '7', '3', '/', '3', '3.5', '0.5', '3', '4',
                              '3.43', '1.40']
  assert lines[4] == '0 of 2 users left out (empty); 2 kept.'
  out = _run('--dataset=movielens', '--data_option', f'path={folder}', '--min_samples=4',
             '--format=json')
  assert out.returncode == 0, out.stderr
  got = json.loads(out.stdout)
  assert (got['users'], got['ratings'], got['items'], got['filtered']) == (1, 4, 3, 1)
  assert (got['ratings_min'], got['ratings_max']) == (4, 4)
  assert got['rating_mean'] == pytest.approx(13 / 4)
  out = _run('--dataset=movielens', f'--data_option=path={tmp_path}/absent')
  assert out.returncode != 0 and 'u.data' in out.stderr and 'absent' in out.stderr


def test_seeds_print_each_seeds_split_and_draw_clients_on_a_generated_emnist_file(tmp_path):
  """A generated TFF-format EMNIST file of 40 writers (3 under k = 10): --seeds prints each
  seed's train / validation / test writers, as a training run of that seed splits them, and
  --draw_clients=20 draws 20 of the 37 kept by seed (the paper's 1,068 for a larger file)."""
  from tests.data.sql_client_data import write_sql_client_data
  from tff_meta.data import protocol
  rng = np.random.default_rng(0)
  sizes = {f'w{i:02d}': (4 if i < 3 else 12) for i in range(40)}
  example = lambda n: {'label': rng.integers(0, 62, n).astype(np.int32),
                       'pixels': rng.random((n, 28, 28)).astype(np.float32)}
  write_sql_client_data(str(tmp_path / 'emnist_all.sqlite'), {
      'all_train': {c: example(n - 2) for c, n in sizes.items()},
      'all_test': {c: example(2) for c in sizes}})
  out = _run('--dataset=emnist', f'--cache_dir={tmp_path}', '--min_samples=10', '--seeds=0,1')
  assert out.returncode == 0, out.stderr
  assert '3 of 40 clients left out (fewer than 10 samples); 37 kept.' in out.stdout
  ds = load_dataset('emnist', cache_dir=str(tmp_path))
  for seed in (0, 1):
    data = protocol.prepare(ds, support_fraction=0.2, min_samples=10, seed=seed)
    test = ' '.join(c.client_id for c in data.test)
    assert (f'seed {seed}: {len(data.train)} train / {len(data.validation)} validation / '
            f'{len(data.test)} test clients; test: {test}') in out.stdout
  out = _run('--dataset=emnist', f'--cache_dir={tmp_path}', '--min_samples=10', '--seeds=3',
             '--draw_clients=20', '--format=json')
  assert out.returncode == 0, out.stderr
  got = json.loads(out.stdout)['seeds']['3']
  data = protocol.prepare(ds, support_fraction=0.2, min_samples=10, seed=3, draw_clients_count=20)
  assert got['train'] == [c.client_id for c in data.train]
  assert got['test'] == [c.client_id for c in data.test] and got['not_drawn'] == 17
  assert len(got['train'] + got['validation'] + got['test']) == 20
  out = _run('--dataset=digits', '--seeds=x')
  assert out.returncode != 0 and out.stderr.strip().splitlines()[-1].startswith('error: --seeds')
