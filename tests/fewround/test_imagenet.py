"""miniImageNet / tieredImageNet folder readers on small generated files."""

import csv
import os
import pickle

import numpy as np
import pytest
from PIL import Image

from tff_meta.data.types import DataError
from tff_meta.fewround import tasks


def test_pickle_cache_format(tmp_path):
  rng = np.random.default_rng(0)
  for split, names in (('train', 'ab'), ('val', 'c'), ('test', 'de')):
    images = rng.integers(0, 256, (2 * len(names), 6, 6, 3), dtype=np.uint8)
    class_dict = {n: [2 * i, 2 * i + 1] for i, n in enumerate(names)}
    with open(tmp_path / f'mini-imagenet-cache-{split}.pkl', 'wb') as f:
      pickle.dump({'image_data': images, 'class_dict': class_dict}, f)
  data = tasks.load_class_split('mini_imagenet', path=str(tmp_path))
  assert [list(v) for v in data.classes.values()] == [[0, 1], [2], [3, 4]]
  np.testing.assert_array_equal(data.y, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
  assert data.x.dtype == np.float32 and data.x.max() <= 1.0 and data.element_shape == (6, 6, 3)


def test_csv_with_images_format(tmp_path):
  os.makedirs(tmp_path / 'images')
  for split, names in (('train', ['n1', 'n2']), ('val', ['n3']), ('test', ['n4'])):
    with open(tmp_path / f'{split}.csv', 'w', newline='') as f:
      writer = csv.writer(f)
      writer.writerow(['filename', 'label'])
      for i, n in enumerate(names):
        Image.fromarray(np.full((5, 5, 3), 10 * i, np.uint8)).save(tmp_path / 'images' / f'{n}.png')
        writer.writerow([f'{n}.png', n])
  data = tasks.load_class_split('tiered_imagenet', path=str(tmp_path))
  assert [len(v) for v in data.classes.values()] == [2, 1, 1]
  assert data.x.shape == (4, 5, 5, 3)


def test_missing_folder_names_the_fix(tmp_path):
  with pytest.raises(DataError, match='--data_path'):
    tasks.load_class_split('mini_imagenet')
  with pytest.raises(DataError, match='does not exist'):
    tasks.load_class_split('tiered_imagenet', path=str(tmp_path / 'nope'))
  with pytest.raises(DataError, match="split 'train' not found"):
    tasks.load_class_split('mini_imagenet', path=str(tmp_path))
