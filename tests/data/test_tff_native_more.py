"""Tests for tff_native's CIFAR-100 and Stack Overflow loaders.

The sqlite files are written here with TFF's own writer
(`tff.simulation.datasets.save_to_sql_client_data`) in the feature format of
TFF's downloads (`cifar100.sqlite`: int64 `image` [32, 32, 3], `label`,
`coarse_label`; `stackoverflow.sqlite`: string `tokens`, `title`, `tags`,
`creation_date`, `type`, int64 `score`), and the loaders' arrays are compared
with what TFF's `load_data(cache_dir=...)` reads from the same files.
"""

import collections
import json
import os
import shutil
import sqlite3

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.stackoverflow import (
    tag_prediction_preprocessing)

from tff_meta.data import DATASETS, load_dataset
from tff_meta.data import tff_native
from tff_meta.data.types import DataError


def write_sql_client_data(path, splits):
  """Writes {split: {client id: OrderedDict of arrays}} as one SqlClientData file.

  `save_to_sql_client_data` puts every client in one split, while TFF's files
  reuse client ids across splits, so each split is written on its own and the
  rows are then appended, split after split, to one file of the same schema.
  """
  parts = []
  for split, clients in splits.items():
    part = f'{path}.{split}'
    tff.simulation.datasets.save_to_sql_client_data(
        list(clients),
        lambda cid, clients=clients: tf.data.Dataset.from_tensor_slices(
            clients[cid]),
        part, split_names_by_client_id={cid: split for cid in clients})
    parts.append(part)
  shutil.copyfile(parts[0], path)
  with sqlite3.connect(path) as conn:
    for part in parts[1:]:
      conn.execute('ATTACH DATABASE ? AS part', (part,))
      conn.execute('INSERT INTO examples SELECT * FROM part.examples')
      conn.execute(
          'INSERT INTO client_metadata SELECT * FROM part.client_metadata')
      conn.commit()
      conn.execute('DETACH DATABASE part')
  conn.close()
  for part in parts:
    os.remove(part)


def _cifar_client(rng, n):
  return collections.OrderedDict(
      coarse_label=rng.integers(0, 20, n).astype(np.int64),
      image=rng.integers(0, 256, (n, 32, 32, 3)).astype(np.uint8),
      label=rng.integers(0, 100, n).astype(np.int64))


CIFAR_TRAIN_IDS = ('0', '1', '2', '10')  # sorted as strings: 0, 1, 10, 2
CIFAR_TEST_IDS = ('0', '1')


@pytest.fixture(scope='module')
def cifar_dir(tmp_path_factory):
  folder = tmp_path_factory.mktemp('tff_cifar')
  rng = np.random.default_rng(0)
  write_sql_client_data(str(folder / tff_native.CIFAR100_FILE), {
      'train': {cid: _cifar_client(rng, 3 + i)
                for i, cid in enumerate(CIFAR_TRAIN_IDS)},
      'test': {cid: _cifar_client(rng, 2 + i)
               for i, cid in enumerate(CIFAR_TEST_IDS)},
  })
  return str(folder)


@pytest.mark.parametrize('split', ['train', 'test'])
def test_cifar100_equals_tff_load_data(cifar_dir, split):
  train, test = tff.simulation.datasets.cifar100.load_data(cache_dir=cifar_dir)
  reference = {'train': train, 'test': test}[split]
  ds = tff_native.load_tff_cifar100(cifar_dir, split=split)
  assert ds.name == 'tff_cifar100' and ds.num_classes == 100
  assert ds.element_shape == (32, 32, 3)
  assert list(ds.clients) == reference.client_ids
  for cid in reference.client_ids:
    rows = list(reference.create_tf_dataset_for_client(cid).as_numpy_iterator())
    got = ds.clients[cid]
    assert got.x.dtype == np.float32 and got.y.dtype == np.int32
    assert got.x.shape == (len(rows), 32, 32, 3)
    images = np.stack([r['image'] for r in rows])
    assert images.dtype == np.uint8
    np.testing.assert_array_equal(got.x, images.astype(np.float32) / 255)
    np.testing.assert_array_equal(got.y, [r['label'] for r in rows])
    np.testing.assert_array_equal(ds.extras['coarse_labels'][cid],
                                  [r['coarse_label'] for r in rows])
  x = np.concatenate([c.x for c in ds.clients.values()])
  assert x.min() >= 0.0 and x.max() <= 1.0


def test_cifar100_all_coarse_and_max_clients(cifar_dir):
  ds = tff_native.load_tff_cifar100(cifar_dir, label='coarse')
  assert ds.num_classes == 20
  assert list(ds.clients) == ['0', '1', '10', '2', 'test/0', 'test/1']
  assert [len(c) for c in ds.clients.values()] == [3, 4, 6, 5, 2, 3]
  fine = tff_native.load_tff_cifar100(cifar_dir)
  for cid, c in ds.clients.items():
    np.testing.assert_array_equal(c.x, fine.clients[cid].x)
    np.testing.assert_array_equal(c.y, fine.extras['coarse_labels'][cid])
    np.testing.assert_array_equal(ds.extras['fine_labels'][cid],
                                  fine.clients[cid].y)
  test = tff_native.load_tff_cifar100(cifar_dir, split='test')
  np.testing.assert_array_equal(fine.clients['test/1'].x, test.clients['1'].x)
  assert list(tff_native.load_tff_cifar100(cifar_dir, max_clients=2).clients) \
      == ['0', '1']
  assert list(tff_native.load_tff_cifar100(cifar_dir, max_clients=5).clients) \
      == ['0', '1', '10', '2', 'test/0']
  with pytest.raises(DataError, match='label'):
    tff_native.load_tff_cifar100(cifar_dir, label='superclass')
  with pytest.raises(DataError, match='split'):
    tff_native.load_tff_cifar100(cifar_dir, split='heldout')


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
  write_sql_client_data(str(folder / tff_native.STACKOVERFLOW_FILE), {
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
    ds = tff_native.load_stackoverflow(so_dir, split=split, vocab_size=12,
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
  ds = tff_native.load_stackoverflow(so_dir, vocab_size=4, num_tags=3)
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
  every = tff_native.load_stackoverflow(so_dir, split='all', vocab_size=4,
                                        words=ds.extras['words'],
                                        tags=ds.extras['tags'])
  assert list(every.clients) == ['00000001', '00000002', '00000003', '00000010']
  # Client 3's test post 'kotlin|android' has no vocabulary tag.
  assert [len(c) for c in every.clients.values()] == [4, 2, 2, 1]
  assert every.extras['dropped_examples'] == 2
  np.testing.assert_array_equal(every.clients['00000003'].x[:2],
                                ds.clients['00000003'].x)
  assert list(tff_native.load_stackoverflow(
      so_dir, max_clients=2).clients) == ['00000001', '00000002']


def test_stackoverflow_vocabularies_from_tff_count_files(so_dir, tmp_path):
  shutil.copy(os.path.join(so_dir, tff_native.STACKOVERFLOW_FILE), tmp_path)
  side = tmp_path / 'datasets'  # where tf.keras.utils.get_file extracts them
  side.mkdir()
  (side / 'stackoverflow.word_count').write_text(
      'java 9\npython 8\nsort 7\nlist 1\n')
  (side / 'stackoverflow.tag_count').write_text(
      json.dumps({'list': 3, 'android': 5, 'java': 9, 'python': 5}))
  ds = tff_native.load_stackoverflow(str(tmp_path), vocab_size=3, num_tags=3)
  assert ds.extras['words'] == ('java', 'python', 'sort')
  assert ds.extras['tags'] == ('java', 'android', 'python')  # ties: file order
  assert ds.extras['word_source'] == str(side / 'stackoverflow.word_count')
  assert ds.extras['tag_source'] == str(side / 'stackoverflow.tag_count')
  # The same word list given as a path or as a list.
  as_path = tff_native.load_stackoverflow(
      str(tmp_path), words=str(side / 'stackoverflow.word_count'),
      vocab_size=3, tags=['java', 'android', 'python'])
  as_list = tff_native.load_stackoverflow(
      str(tmp_path), words=['java', 'python', 'sort'], tags=ds.extras['tags'])
  for other in (as_path, as_list):
    for cid, c in ds.clients.items():
      np.testing.assert_array_equal(other.clients[cid].x, c.x)
      np.testing.assert_array_equal(other.clients[cid].y, c.y)
  (side / 'stackoverflow.word_count').write_text('java 9\npython\n')
  with pytest.raises(DataError, match='line 2'):
    tff_native.load_stackoverflow(str(tmp_path))
  with pytest.raises(DataError, match='repeats'):
    tff_native.load_stackoverflow(str(tmp_path), words=['a', 'b', 'a'],
                                  tags=['java'])


def test_stackoverflow_bad_options(so_dir):
  with pytest.raises(DataError, match='task'):
    tff_native.load_stackoverflow(so_dir, task='next_word')
  with pytest.raises(DataError, match='split'):
    tff_native.load_stackoverflow(so_dir, split='validation')
  with pytest.raises(DataError, match='vocab_size'):
    tff_native.load_stackoverflow(so_dir, vocab_size=0)
  with pytest.raises(DataError, match='no-such-file'):
    tff_native.load_stackoverflow(so_dir, tags='/no-such-file.json')


@pytest.mark.parametrize('loader, filename', [
    (tff_native.load_tff_cifar100, 'cifar100.sqlite'),
    (tff_native.load_stackoverflow, 'stackoverflow.sqlite')])
def test_missing_sqlite_names_file_folder_and_fix(tmp_path, loader, filename):
  folder = tmp_path / 'cache'
  with pytest.raises(DataError) as e:
    loader(str(folder))
  msg = str(e.value)
  assert os.path.join(str(folder), filename) in msg
  assert 'does not exist' in msg and 'tff.simulation.datasets' in msg
  assert f'copy an existing {filename}' in msg
  assert not folder.exists()  # Nothing was downloaded or created.


def test_registered_names(cifar_dir, so_dir):
  ds = load_dataset('tff_cifar100', cache_dir=cifar_dir, split='train',
                    max_clients=1)
  assert ds.name == 'tff_cifar100' and list(ds.clients) == ['0']
  so = load_dataset('stackoverflow', cache_dir=so_dir, num_tags=2)
  assert so.name == 'stackoverflow' and so.num_classes == 2
  # 'cifar100' stays the centralized CIFAR-100 split into clients.
  assert DATASETS.get('cifar100').resolve().keywords == {'name': 'cifar100'}
  with pytest.raises(DataError, match='Unknown option'):
    load_dataset('stackoverflow', cache_dir=so_dir, seq_length=20)
