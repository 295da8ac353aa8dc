"""deploy.test_episodes: the summary, and a stopped test resuming to the same numbers."""

import json

import numpy as np
import pytest

from tff_meta.fewround import deploy

ROUNDS = [1, 3]


def fake_episode(calls, stop_at=None):
  """An episode function whose accuracy depends on the episode's data alone, as a real
  episode's does (test episode i is drawn from (seed, stream, i)); it records what it plays,
  and raises at episode `stop_at`, as a stopped run would."""

  def episode_fn(start, round_fn, evaluate, weights, clients, rounds):
    if clients == stop_at:
      raise KeyboardInterrupt
    calls.append(clients)
    rng = np.random.default_rng(clients)
    return {r: float(rng.uniform()) + 0.01 * r + float(np.sum(weights[0])) for r in rounds}

  return episode_fn


def run(weights, n, calls, path=None, stop_at=None, fingerprint='cfg'):
  return deploy.test_episodes((None, None, None), weights, lambda i: i, n, ROUNDS,
                              episode_fn=fake_episode(calls, stop_at), progress_file=path,
                              fingerprint=fingerprint)


def test_mean_and_ci_per_round():
  s = deploy.mean_ci([0.5, 0.7, 0.9])
  assert s.mean == pytest.approx(0.7) and s.episodes == 3
  assert s.ci95 == pytest.approx(1.96 * 0.2 / np.sqrt(3))
  assert str(s) == '70.00% ± 22.63'


def test_a_stopped_test_resumes_after_its_last_saved_episode(tmp_path):
  weights = [np.zeros(3, np.float32)]
  whole = run(weights, 25, [])
  path = str(tmp_path / 'progress.json')
  with pytest.raises(KeyboardInterrupt):
    run(weights, 25, [], path, stop_at=17)
  saved = json.loads(open(path).read())['accuracy']
  assert {k: len(v) for k, v in saved.items()} == {'1': 10, '3': 10}   # saved every 10
  calls = []
  resumed = run(weights, 25, calls, path)
  assert calls == list(range(10, 25))          # episodes 0-9 were not played again
  for r in ROUNDS:
    assert resumed[r].accuracies == whole[r].accuracies
    assert (resumed[r].mean, resumed[r].ci95) == (whole[r].mean, whole[r].ci95)
  assert len(json.loads(open(path).read())['accuracy']['1']) == 25   # saved at the end too


def test_more_test_episodes_extend_a_finished_test(tmp_path):
  weights = [np.zeros(3, np.float32)]
  path = str(tmp_path / 'progress.json')
  run(weights, 12, [], path)
  calls = []
  longer = run(weights, 30, calls, path)
  assert calls == list(range(12, 30))
  assert longer[3].accuracies == run(weights, 30, [])[3].accuracies
  calls = []
  shorter = run(weights, 5, calls, path)       # fewer: the first 5 saved, nothing played
  assert calls == [] and shorter[1].accuracies == longer[1].accuracies[:5]


@pytest.mark.parametrize('change', ['weights', 'fingerprint', 'rounds', 'unreadable'])
def test_progress_of_another_test_is_not_used(tmp_path, change):
  weights = [np.zeros(3, np.float32)]
  path = tmp_path / 'progress.json'
  run(weights, 10, [], str(path))
  calls = []
  if change == 'weights':
    other = [np.full(3, 0.5, np.float32)]
    result = run(other, 10, calls, str(path))
    assert result[1].accuracies == run(other, 10, [])[1].accuracies
  elif change == 'fingerprint':
    run(weights, 10, calls, str(path), fingerprint='another config')
  elif change == 'rounds':
    deploy.test_episodes((None, None, None), weights, lambda i: i, 10, [1, 2],
                         episode_fn=fake_episode(calls), progress_file=str(path),
                         fingerprint='cfg')
  else:
    path.write_text('{"key": ')
    run(weights, 10, calls, str(path))
  assert calls == list(range(10))              # every episode played again


def test_the_key_tells_weights_apart_by_bytes_and_shape():
  key = lambda w: deploy.progress_key(w, [1], '')
  a = [np.zeros((2, 3), np.float32)]
  assert key(a) == key([np.zeros((2, 3), np.float32)])
  assert key(a) != key([np.zeros((3, 2), np.float32)])
  assert key(a) != key([np.zeros((2, 3), np.float64)])
  b = [np.zeros((2, 3), np.float32)]
  b[0][1, 2] = 1e-7
  assert key(a) != key(b)
