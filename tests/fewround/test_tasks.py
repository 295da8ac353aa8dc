"""Episodes: only their N classes, test classes never in meta-training; pre-training labels."""

import numpy as np

from tff_meta.fewround import baselines, tasks
from tff_meta.fewround.config import FewRoundConfig


def synthetic(num_classes=20, per_class=30):
  """Images whose every pixel is the class id, so a client's x reveals its classes."""
  y = np.repeat(np.arange(num_classes), per_class).astype(np.int32)
  x = np.broadcast_to(y[:, None, None].astype(np.float32), (len(y), 4, 4)).copy()
  return tasks._split('synthetic', x, y, (64, 16, 20), 0, '')  # pylint: disable=protected-access


def test_episode_has_n_classes_of_its_part_and_halves():
  data = synthetic()
  for iid in (True, False):
    clients = tasks.episode(data, 'train', 5, 20, 4, iid, seed=(0, 0, 1))
    original = np.unique(np.concatenate([c['support_x'][:, 0, 0] for c in clients]
                                        + [c['query_x'][:, 0, 0] for c in clients]))
    assert len(original) == 5 and set(original.astype(int)) <= set(data.part('train'))
    for c in clients:
      assert c['num_ways'] == 5
      assert set(c['support_y']) <= set(range(5)) and set(c['query_y']) <= set(c['support_y'])
      # a label always maps to one original class
      for label in np.unique(c['support_y']):
        assert len(np.unique(c['support_x'][c['support_y'] == label, 0, 0])) == 1
    assert sum(len(c['support_y']) + len(c['query_y']) for c in clients) == 100


def test_meta_training_never_sees_test_classes():
  data = synthetic()
  assert not set(data.part('train')) & set(data.part('test'))
  cfg = FewRoundConfig(n_way=(3, 7), examples_per_class=20, num_clients=4, iid=False)
  ctx = baselines.Context(cfg, data)
  seen = set()
  for e in range(30):
    for c in ctx.episode('train', baselines.TRAIN_STREAM, e):
      seen |= set(c['support_x'][:, 0, 0].astype(int)) | set(c['query_x'][:, 0, 0].astype(int))
  assert seen <= set(data.part('train'))
  ways = {int(ctx.episode('train', 0, e)[0]['num_ways']) for e in range(30)}
  assert ways <= set(range(3, 8)) and len(ways) > 1


def test_pretrain_clients_use_global_meta_train_labels():
  data = synthetic()
  train = data.part('train')
  for c in tasks.pretrain_clients(data, 5, 20, 4, True, seed=(0, 1, 0)):
    assert c['num_ways'] == len(train) and len(c['query_y']) == 0
    np.testing.assert_array_equal(train[c['support_y']], c['support_x'][:, 0, 0].astype(int))


def test_leaf_femnist_pools_the_writers_and_splits_all_62_classes():
  import os  # pylint: disable=g-import-not-at-top
  import pytest  # pylint: disable=g-import-not-at-top
  from tests.conftest import FIXTURES  # pylint: disable=g-import-not-at-top
  from tff_meta.data import load_dataset  # pylint: disable=g-import-not-at-top
  from tff_meta.data.types import DataError  # pylint: disable=g-import-not-at-top
  path = os.path.join(FIXTURES, 'leaf', 'femnist')
  data = tasks.load_class_split('leaf_femnist', (64, 16, 20), 3, path=path)
  ds = load_dataset('leaf_femnist', path=path)
  assert len(data.y) == sum(len(c.y) for c in ds.clients.values()) == 90
  assert data.element_shape == (28, 28)
  parts = [set(data.part(p).tolist()) for p in tasks.PARTS]
  assert [len(p) for p in parts] == [40, 10, 12]   # all 62 classes, as for 'emnist'
  assert set.union(*parts) == set(range(62)) and sum(map(len, parts)) == 62
  # the split is the seed's, as for TFF's file (fewer labels seen must not shrink it)
  assert [list(data.part(p)) for p in tasks.PARTS] == [
      list(p) for p in tasks.episodes.class_split(62, (64, 16, 20), 3)]
  assert tasks.path_option('leaf_femnist') == 'path'
  with pytest.raises(DataError, match='needs the LEAF FEMNIST data folder.*--data_path'):
    tasks.load_class_split('leaf_femnist')


def test_data_path_replaces_the_configs_folder_of_another_source():
  import dataclasses  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround import config as config_lib  # pylint: disable=g-import-not-at-top
  cfg = dataclasses.replace(FewRoundConfig(), dataset='leaf_femnist',
                            data={'cache_dir': 'tff_dir', 'other': 1})
  got = config_lib.with_data_path(cfg, '/leaf', tasks.path_option('leaf_femnist'))
  assert got.data == {'other': 1, 'path': '/leaf'}
  assert config_lib.with_data_path(cfg, None, 'path') is cfg   # no flag: the config as it is


def test_no_download_sets_the_option_of_a_source_that_downloads():
  import dataclasses  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround import config as config_lib  # pylint: disable=g-import-not-at-top
  cfg = dataclasses.replace(FewRoundConfig(), dataset='emnist', data={'cache_dir': '/tff'})
  assert tasks.takes_option('emnist', 'download')
  assert not tasks.takes_option('leaf_femnist', 'download')
  got = config_lib.without_download(cfg, True, tasks.takes_option('emnist', 'download'))
  assert got.data == {'cache_dir': '/tff', 'download': False}
  assert config_lib.without_download(cfg, None, True) is cfg   # no flag: the config as it is
  assert config_lib.without_download(cfg, True, False) is cfg  # a source that downloads nothing
