"""Tests for research.movielens_synth.synth and research/movielens_synth/__main__.py: the generated folder
has ml-100k's public statistics, a bias and a latent (genre) structure, and is deterministic."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tff_meta.data import movielens
from research.movielens_synth import synth as movielens_synth

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
  return movielens_synth.write(str(tmp_path_factory.mktemp('ml') / 'gen'), seed=0)


@pytest.fixture(scope='module')
def table(folder):
  """u.data as int64 [n, 4]: user, item, rating, timestamp."""
  return np.loadtxt(os.path.join(folder, 'u.data'), dtype=np.int64, delimiter='\t')


def test_the_loader_reads_ml100k_sizes(folder):
  ds = movielens.load_movielens(folder)
  assert (ds.num_users, ds.num_items, ds.num_ratings) == (943, 1682, 100_000)
  assert len(ds.clients) == 943 and ds.max_item_id == 1682
  assert ds.occupations == tuple(sorted(movielens_synth.OCCUPATIONS))
  assert min(len(c) for c in ds.clients.values()) >= 20
  assert max(len(c) for c in ds.clients.values()) <= 737


def test_every_item_rated_once_per_user_at_most(table):
  assert len(np.unique(table[:, 0] * 10_000 + table[:, 1])) == len(table)
  counts = np.bincount(table[:, 1], minlength=1683)[1:]
  assert counts.min() >= 1
  assert 300 <= counts.max() <= 800            # ml-100k: 583 (Star Wars)
  per_user = np.bincount(table[:, 0])[1:]
  assert 50 <= np.median(per_user) <= 90        # ml-100k: 65


def test_star_histogram_matches_ml100k(table):
  shares = np.bincount(table[:, 2], minlength=6)[1:] / len(table)
  np.testing.assert_allclose(shares, [0.061, 0.114, 0.271, 0.342, 0.212], atol=0.0005)


def test_timestamps_span_ml100k_in_sessions(table):
  assert table[:, 3].min() >= 874724710 and table[:, 3].max() <= 893286638
  assert table[:, 3].max() - table[:, 3].min() > 200 * 86400
  gaps, long_gaps = [], 0
  for u in range(1, 944):
    t = np.sort(table[table[:, 0] == u, 3])
    gaps.append(np.median(np.diff(t)))
    long_gaps += np.any(np.diff(t) > 86400)
  assert np.median(gaps) < 300                  # ratings of a session are minutes apart
  assert 100 < long_gaps < 900                  # many, not all, users come back on a later day


@pytest.mark.slow
def test_same_seed_same_files_other_seed_other_files():
  a, b = movielens_synth.generate(3), movielens_synth.generate(3)
  assert a == b
  assert movielens_synth.generate(4)['u.data'] != a['u.data']


def _rmse(e):
  return float(np.sqrt(np.mean(np.square(e))))


def test_biases_carry_signal_genre_tastes_hardly(folder, table):
  """Item means of half the users beat the global mean on the other half; a user's bias from
  half their ratings helps further; the user's genre tastes help less (as on ml-100k: item
  quality and taste are mostly not in the genres; `Knobs.genre_taste_sd`)."""
  genres = np.array([[int(f) for f in line.split('|')[5:]]
                     for line in open(os.path.join(folder, 'u.item'), encoding='latin-1')])
  train = table[table[:, 0] % 2 == 0]
  test = table[table[:, 0] % 2 == 1]
  mu = train[:, 2].mean()
  sums = np.bincount(train[:, 1], train[:, 2] - mu, minlength=1683)
  b_item = sums / (np.bincount(train[:, 1], minlength=1683) + 5.0)
  e_mean, e_item, e_user, e_genre = [], [], [], []
  for u in np.unique(test[:, 0]):
    rows = test[test[:, 0] == u]
    half = len(rows) // 2
    fit, held = rows[:half], rows[half:]
    r_fit = fit[:, 2] - mu - b_item[fit[:, 1]]
    b_user = r_fit.sum() / (len(fit) + 5.0)
    g_fit, g_held = genres[fit[:, 1] - 1], genres[held[:, 1] - 1]
    taste = g_fit.T @ (r_fit - b_user) / (g_fit.sum(0) + 5.0)
    base = mu + b_item[held[:, 1]] + b_user
    e_mean.append(held[:, 2] - mu)
    e_item.append(held[:, 2] - mu - b_item[held[:, 1]])
    e_user.append(held[:, 2] - base)
    e_genre.append(held[:, 2] - base - g_held @ taste / np.maximum(g_held.sum(1), 1))
  mean, item, user, genre = (_rmse(np.concatenate(e)) for e in (e_mean, e_item, e_user, e_genre))
  assert item < mean - 0.04
  assert user < item - 0.04
  assert genre > user - 0.05    # the genre tastes gain at most 0.05 (movielens_synth doc)
  assert 0.85 < user < 1.05                     # ml-100k: about 0.93-0.95


def _program(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'research.movielens_synth', *args], cwd=REPO,
                        env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_program_writes_the_generated_folder_and_protects_real_data(tmp_path):
  out = _program(f'--output_dir={tmp_path / "gen"}', '--seed=2')
  assert out.returncode == 0, out.stderr
  assert (tmp_path / 'gen' / 'u.data').read_text() == movielens_synth.generate(2)['u.data']
  again = _program(f'--output_dir={tmp_path / "gen"}', '--seed=2', '--stats')   # rewritten
  assert again.returncode == 0, again.stderr
  assert '| bias_rmse_chronological |' in again.stdout
  assert '| oracle_p@1_chronological |' in again.stdout    # its expected ratings, seed 2
  real = tmp_path / 'real'
  real.mkdir()
  (real / 'u.data').write_text('1\t1\t5\t881250949\n')
  refused = _program(f'--output_dir={real}')
  assert refused.returncode == 1
  assert refused.stderr.startswith('error: ') and len(refused.stderr.strip().splitlines()) == 1
  assert (real / 'u.data').read_text() == '1\t1\t5\t881250949\n'
  missing = _program()
  assert missing.returncode == 1 and missing.stderr.startswith('error: --output_dir is required')


def test_calibrated_to_the_real_ml100k_baselines(folder):
  """Issue #15: the bias baseline's RMSE lands within 0.012 of its ml-100k values with both
  samplings, the item-bias-only RMSE within 0.016; the item-mean ranking's Precision@k within
  0.09 (rating 5) and 0.11 (rating >= 4) (measured: docs/RESULTS.md of 3ab6296, section 8);
  chronological
  query sets are harder for the bias baseline and the item-mean ranking than random ones, as on
  ml-100k (users drift). (Since the factor calibration of 2026-11-25 the item-only RMSE,
  chronological, is 0.015 low and the ranking's chronological P@1 is 0.06 below the random one,
  against 0.14 on ml-100k; before it, 0.007 and 0.16.)"""
  from research.movielens_synth import calibration   # pylint: disable=g-import-not-at-top
  stats = calibration.statistics(movielens.load_movielens(folder))
  real = calibration.REAL_ML100K
  for key in ('bias_rmse_chronological', 'bias_rmse_random'):
    assert abs(stats[key] - real[key]) < 0.012, (key, stats[key])
  for key in ('item_rmse_chronological', 'item_rmse_random'):
    assert abs(stats[key] - real[key]) < 0.016, (key, stats[key])
  for key in (k for k in real if k.startswith('item_p')):
    assert abs(stats[key] - real[key]) < (0.11 if key.startswith('item_p4') else 0.09), key
  assert stats['bias_rmse_chronological'] > stats['bias_rmse_random'] + 0.01
  assert stats['item_p@1_chronological'] < stats['item_p@1_random'] - 0.05


@pytest.mark.slow
def test_factor_structure_matches_the_published_ml100k_gain(folder):
  """Issue #15: scikit-surprise's own ml-100k benchmark (5-fold, RMSE) has BaselineOnly 0.944
  and SVD 0.934, a 0.010 gain from item factors; the generated folder lands within 0.012 of
  both and its gain within 0.004-0.02 (the generator before 2026-11-25 gained 0.037: 0.930 /
  0.893, flattering every method that learns item factors; docs/RESULTS.md 8a')."""
  from research.movielens_synth import calibration   # pylint: disable=g-import-not-at-top
  stats = calibration.factor_statistics(movielens.load_movielens(folder))
  for key, value in calibration.PUBLISHED_ML100K.items():
    assert abs(stats[key] - value) < 0.012, (key, stats[key])
  assert 0.004 < stats['surprise_baseline_rmse'] - stats['surprise_svd_rmse'] < 0.02, stats


def test_expected_stars_by_hand():
  """Ten scores: the rank classes' shares put the cut-offs (halfway between neighbours) after the
  1st, 2nd, 4th and 8th sorted score (shares 0.061 / 0.114 / 0.271 /
  0.342 / 0.212 of 10, rounded cumulatively); E[stars | m] = 1 + sum_k Phi((m - t_k) / sd)."""
  scores = np.array([9.0, 0.0, 2.0, 4.0, 1.0, 6.0, 3.0, 7.0, 5.0, 8.0])
  assert movielens_synth._stars(scores).tolist() == [5, 1, 3, 4, 2, 4, 3, 4, 4, 5]
  cuts = (0.5, 1.5, 3.5, 7.5)
  phi = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))
  means = np.array([-50.0, 1.5, 4.0, 50.0])
  want = [1 + sum(phi((m - t) / 2.0) for t in cuts) for m in means]
  np.testing.assert_allclose(movielens_synth.expected_stars(means, scores, 2.0), want, rtol=1e-12)
  assert want[0] == pytest.approx(1) and want[-1] == pytest.approx(5)


def test_expected_ratings_are_the_ratings_without_their_noise(table):
  """Every rating has one; their mean is the stars' mean, and they rise with the stars."""
  expected = movielens_synth.expected_ratings(0)
  assert set(expected) == set(zip(table[:, 0].tolist(), table[:, 1].tolist()))
  e = np.array([expected[u, i] for u, i in table[:, :2].tolist()])
  assert 1 <= e.min() and e.max() <= 5
  assert abs(e.mean() - table[:, 2].mean()) < 0.005
  by_star = [e[table[:, 2] == k].mean() for k in range(1, 6)]
  assert np.all(np.diff(by_star) > 0.5)
  assert _rmse(e - table[:, 2]) < 0.8           # the bias baseline: about 0.95


def test_knobs_change_the_ratings_deterministically():
  calm = movielens_synth.Knobs(noise_sd=0.1)
  assert movielens_synth.generate(1, calm) == movielens_synth.generate(1, calm)
  assert movielens_synth.generate(1, calm)['u.data'] != movielens_synth.generate(1)['u.data']


@pytest.mark.slow
def test_program_prints_calibration_statistics(folder, tmp_path):
  out = _program(f'--stats_of={folder}')
  assert out.returncode == 0, out.stderr
  assert '| bias_rmse_chronological |' in out.stdout and '0.9459' in out.stdout
  bad = _program(f'--stats_of={tmp_path / "absent"}')
  assert bad.returncode == 1
  assert bad.stderr.startswith('error: ') and len(bad.stderr.strip().splitlines()) == 1
