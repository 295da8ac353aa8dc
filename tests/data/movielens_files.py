"""Hand-written ml-100k folders in GroupLens' format (u.user, u.item, u.data) for the data tests."""

USERS = ['1|24|M|technician|85711', '2|53|F|other|94043', '3|23|M|writer|32067']
ITEMS = [
    '1|Toy Story (1995)|01-Jan-1995||http://x|0|0|0|1|1|1|0|0|0|0|0|0|0|0|0|0|0|0|0',
    '2|GoldenEye (1995)|01-Jan-1995||http://x|0|1|1|0|0|0|0|0|0|0|0|0|0|0|0|0|1|0|0',
    '3|Café Society (1995)|01-Jan-1995||http://x|0|0|0|0|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0',
]
# user, item, rating, timestamp: out of time order on purpose.
RATINGS = [(1, 1, 5, 300), (1, 2, 3, 100), (2, 3, 4, 50), (1, 3, 1, 200), (2, 1, 2, 10),
           (1, 1, 4, 400), (2, 2, 5, 60)]


def write_ml100k(folder, users=USERS, items=ITEMS, ratings=None, occupation=None):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / 'u.user').write_text('\n'.join(users) + '\n', encoding='latin-1')
  (folder / 'u.item').write_text('\n'.join(items) + '\n', encoding='latin-1')
  lines = ratings if ratings is not None else ['\t'.join(map(str, r)) for r in RATINGS]
  (folder / 'u.data').write_text('\n'.join(lines) + '\n')
  if occupation is not None:
    (folder / 'u.occupation').write_text('\n'.join(occupation) + '\n')
  return str(folder)
