"""Tests for the Stack Overflow loader (tff_meta/data/stackoverflow.py).

The sqlite file is written here with TFF's own writer
(`tff.simulation.datasets.save_to_sql_client_data`, `sql_client_data.py`) in
the feature format of TFF's download (`stackoverflow.sqlite`: string `tokens`,
`title`, `tags`, `creation_date`, `type`, int64 `score`), and the loader's
arrays are compared with what TFF's own tag-prediction preprocessing makes of
what `load_data(cache_dir=...)` reads from the same file.
"""

import collections
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.stackoverflow import (
    tag_prediction_preprocessing)

from tests.data.sql_client_data import check_missing_sqlite_error, write_sql_client_data
from tff_meta.data import load_dataset
from tff_meta.data import stackoverflow
from tff_meta.data.types import DataError


def _so_client(rows):
  """OrderedDict of TFF's Stack Overflow features from (tokens, title, tags)."""
  n = len(rows)
  return collections.OrderedDict(
      creation_date=[b'2010-01-08 09:34:05 UTC'] * n,
      score=np.arange(n, dtype=np.int64),
      tags=[r[2].encode() for r in rows],
      title=[r[1].encode() for r in rows],
      tokens=[r[0].encode() for r in rows],
      type=[b'question', b'answer'] * (n // 2) + [b'answer'] * (n % 2))


SO_TRAIN = {
    '00000001': [('how do i sort a list in python ?', 'sort list python',
                  'python|list|sorting'),
                 ('use sorted ( ) .', 'sort list python', 'python|list'),
                 ('numpy arrays are faster .', 'numpy speed', 'python|numpy')],
    '00000002': [('java streams can sort a list', 'java sort', 'java|sorting'),
                 ('zzz', 'qqq', 'obscure-tag'),
                 ('public static void main', 'java main', 'java')],
    '00000003': [('a list in python', 'python list', 'python'),
                 ('android uses java', 'android java', 'android|java')],
}
SO_TEST = {
    '00000001': [('list comprehension in python', 'python list', 'python')],
    '00000003': [('kotlin replaces java', 'kotlin', 'kotlin|android')],
}
SO_HELDOUT = {
    '00000010': [('sort a java list', 'java list', 'java|list')],
}


@pytest.fixture(scope='module')
def so_dir(tmp_path_factory):
  folder = tmp_path_factory.mktemp('tff_so')
  write_sql_client_data(str(folder / stackoverflow.STACKOVERFLOW_FILE), {
      name: {cid: _so_client(rows) for cid, rows in split.items()}
      for name, split in (('train', SO_TRAIN), ('heldout', SO_HELDOUT),
                          ('test', SO_TEST))})
  return str(folder)


def _tff_tag_examples(client_data, cid, words, tags):
  """(x, y) from TFF's tag-prediction preprocessing, first tag as the label."""
  to_ids = tag_prediction_preprocessing.build_to_ids_fn(list(words), list(tags))
  xs, ys = [], []
  for x, multi_hot in client_data.create_tf_dataset_for_client(cid).map(
      to_ids).as_numpy_iterator():
    if multi_hot.sum():
      xs.append(x)
      ys.append(int(np.flatnonzero(multi_hot)[0]))
  return np.array(xs, np.float32).reshape(-1, len(words)), np.array(ys)


def test_stackoverflow_equals_tff_tag_preprocessing(so_dir):
  train, heldout, test = tff.simulation.datasets.stackoverflow.load_data(
      cache_dir=so_dir)
  for split, reference in (('train', train), ('test', test),
                           ('heldout', heldout)):
    ds = stackoverflow.load_stackoverflow(so_dir, split=split, vocab_size=12,
                                       num_tags=5)
    assert ds.name == 'stackoverflow'
    assert list(ds.clients) == reference.client_ids
    assert len(ds.extras['words']) <= 12 and len(ds.extras['tags']) <= 5
    assert ds.num_classes == len(ds.extras['tags'])
    assert ds.element_shape == (len(ds.extras['words']),)
    for cid in reference.client_ids:
      x, y = _tff_tag_examples(reference, cid, ds.extras['words'],
                               ds.extras['tags'])
      got = ds.clients[cid]
      assert got.x.dtype == np.float32 and got.y.dtype == np.int32
      np.testing.assert_allclose(got.x, x, rtol=1e-6, atol=0)
      np.testing.assert_array_equal(got.y, y)


def test_stackoverflow_vocabularies_counted_by_clients(so_dir):
  ds = stackoverflow.load_stackoverflow(so_dir, vocab_size=4, num_tags=3)
  # Tags by number of train clients having them: java 2 (clients 2, 3),
  # python 2 (1, 3), sorting 2 (1, 2), then 1 each; ties in sorted order.
  assert ds.extras['tags'] == ('java', 'python', 'sorting')
  # Words of `tokens` by clients: 'a' 3, 'list' 3, 'in' 2, 'java' 2, ...
  assert ds.extras['words'] == ('a', 'list', 'in', 'java')
  assert ds.extras['word_source'] == 'counted over the loaded clients'
  # Client 1: python (rank 1) beats sorting (2) in every post. Client 2:
  # java, 'obscure-tag' dropped, java. Client 3: python, then java over android.
  assert ds.clients['00000001'].y.tolist() == [1, 1, 1]
  assert ds.clients['00000002'].y.tolist() == [0, 0]
  assert ds.clients['00000003'].y.tolist() == [1, 0]
  assert ds.extras['dropped_examples'] == 1
  # 'a list in python' + title 'python list': a, list, in, list -> 1/4, 2/4, 1/4.
  np.testing.assert_array_equal(ds.clients['00000003'].x[0], [0.25, 0.5, 0.25, 0])
  # No vocabulary word at all -> a zero row; 'numpy arrays are faster .'.
  np.testing.assert_array_equal(ds.clients['00000001'].x[2], [0, 0, 0, 0])
  every = stackoverflow.load_stackoverflow(so_dir, split='all', vocab_size=4,
                                        words=ds.extras['words'],
                                        tags=ds.extras['tags'])
  assert list(every.clients) == ['00000001', '00000002', '00000003', '00000010']
  # Client 3's test post 'kotlin|android' has no vocabulary tag.
  assert [len(c) for c in every.clients.values()] == [4, 2, 2, 1]
  assert every.extras['dropped_examples'] == 2
  np.testing.assert_array_equal(every.clients['00000003'].x[:2],
                                ds.clients['00000003'].x)
  assert list(stackoverflow.load_stackoverflow(
      so_dir, max_clients=2).clients) == ['00000001', '00000002']


def test_stackoverflow_vocabularies_from_tff_count_files(so_dir, tmp_path):
  shutil.copy(os.path.join(so_dir, stackoverflow.STACKOVERFLOW_FILE), tmp_path)
  side = tmp_path / 'datasets'  # where tf.keras.utils.get_file extracts them
  side.mkdir()
  (side / 'stackoverflow.word_count').write_text(
      'java 9\npython 8\nsort 7\nlist 1\n')
  (side / 'stackoverflow.tag_count').write_text(
      json.dumps({'list': 3, 'android': 5, 'java': 9, 'python': 5}))
  ds = stackoverflow.load_stackoverflow(str(tmp_path), vocab_size=3, num_tags=3)
  assert ds.extras['words'] == ('java', 'python', 'sort')
  assert ds.extras['tags'] == ('java', 'android', 'python')  # ties: file order
  assert ds.extras['word_source'] == str(side / 'stackoverflow.word_count')
  assert ds.extras['tag_source'] == str(side / 'stackoverflow.tag_count')
  # The same word list given as a path or as a list.
  as_path = stackoverflow.load_stackoverflow(
      str(tmp_path), words=str(side / 'stackoverflow.word_count'),
      vocab_size=3, tags=['java', 'android', 'python'])
  as_list = stackoverflow.load_stackoverflow(
      str(tmp_path), words=['java', 'python', 'sort'], tags=ds.extras['tags'])
  for other in (as_path, as_list):
    for cid, c in ds.clients.items():
      np.testing.assert_array_equal(other.clients[cid].x, c.x)
      np.testing.assert_array_equal(other.clients[cid].y, c.y)
  (side / 'stackoverflow.word_count').write_text('java 9\npython\n')
  with pytest.raises(DataError, match='line 2'):
    stackoverflow.load_stackoverflow(str(tmp_path))
  with pytest.raises(DataError, match='repeats'):
    stackoverflow.load_stackoverflow(str(tmp_path), words=['a', 'b', 'a'],
                                  tags=['java'])


def test_stackoverflow_bad_options(so_dir):
  with pytest.raises(DataError, match='task'):
    stackoverflow.load_stackoverflow(so_dir, task='next_word')
  with pytest.raises(DataError, match='split'):
    stackoverflow.load_stackoverflow(so_dir, split='validation')
  with pytest.raises(DataError, match='vocab_size'):
    stackoverflow.load_stackoverflow(so_dir, vocab_size=0)
  with pytest.raises(DataError, match='no-such-file'):
    stackoverflow.load_stackoverflow(so_dir, tags='/no-such-file.json')


def test_missing_sqlite_names_file_folder_and_fix(tmp_path):
  check_missing_sqlite_error(stackoverflow.load_stackoverflow, tmp_path / 'cache',
                             'stackoverflow.sqlite')


def test_registered_name(so_dir):
  so = load_dataset('stackoverflow', cache_dir=so_dir, num_tags=2)
  assert so.name == 'stackoverflow' and so.num_classes == 2
  with pytest.raises(DataError, match='Unknown option'):
    load_dataset('stackoverflow', cache_dir=so_dir, seq_length=20)
