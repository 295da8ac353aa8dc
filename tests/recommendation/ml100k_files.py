"""Writes small ml-100k-format folders (u.data, u.user, u.item) for tests.

MovieLens terms forbid shipping the real files, so tests generate users with
genre tastes: a rating is 1-5, rounded from 3 + taste . genres + noise.
"""

import numpy as np

from tff_meta.data.movielens import GENRES

OCCUPATIONS = ('artist', 'doctor', 'engineer', 'student', 'writer')


def write(folder, num_users=30, num_items=60, ratings_per_user=(20, 40), seed=0):
  rng = np.random.default_rng(seed)
  folder.mkdir(parents=True, exist_ok=True)
  genres = (rng.random((num_items, len(GENRES))) < 0.15).astype(int)
  genres[np.arange(num_items), rng.integers(1, len(GENRES), num_items)] = 1
  items = [f'{i + 1}|Movie {i + 1} (1997)|01-Jan-1997||http://x|' + '|'.join(map(str, g))
           for i, g in enumerate(genres)]
  users, lines = [], []
  for u in range(1, num_users + 1):
    users.append(f'{u}|{int(rng.integers(15, 70))}|{"MF"[u % 2]}|'
                 f'{OCCUPATIONS[u % len(OCCUPATIONS)]}|00000')
    taste = rng.normal(0, 1.2, len(GENRES))
    n = int(rng.integers(ratings_per_user[0], ratings_per_user[1] + 1))
    chosen = rng.choice(num_items, size=n, replace=False)
    times = 880000000 + np.sort(rng.integers(0, 200 * 86400, n))
    for item, t in zip(chosen, times):
      score = 3 + genres[item] @ taste / max(genres[item].sum(), 1) + rng.normal(0, 0.5)
      lines.append(f'{u}\t{item + 1}\t{int(np.clip(np.rint(score), 1, 5))}\t{t}')
  order = rng.permutation(len(lines))           # u.data is not in time order
  (folder / 'u.user').write_text('\n'.join(users) + '\n', encoding='latin-1')
  (folder / 'u.item').write_text('\n'.join(items) + '\n', encoding='latin-1')
  (folder / 'u.data').write_text('\n'.join(lines[i] for i in order) + '\n')
  return str(folder)
