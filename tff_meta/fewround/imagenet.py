"""miniImageNet / tieredImageNet from a user-given folder, in the common split formats.

FRL (Park et al., "Few-Round Learning for Federated Learning", Sec. 4) uses the class splits
of Ravi & Larochelle (2017): miniImageNet 64 / 16 / 20 and tieredImageNet
351 / 97 / 160 train / validation / test classes. Nothing is downloaded; the
folder (config `[data] path` or `--data_path`) holds one of:

- pickles, one per split: `mini-imagenet-cache-{train,val,test}.pkl` or
  `{train,val,test}.pkl`, each a dict with `image_data` (uint8 [n, h, w, 3])
  and `class_dict` (class name -> list of row indices), or with `images` and
  integer `labels`;
- CSV with images: `{train,val,test}.csv` with a header `filename,label`
  and the image files in `images/` (Ravi & Larochelle's format).

Classes get ids in split order (train, then validation, then test), so the
parts are the files' own splits. Images are scaled to float32 in [0, 1].
"""

from __future__ import annotations

import collections
import csv
import io
import os
from typing import List, Optional, Tuple

import numpy as np

from tff_meta.data.image_files import ArrayUnpickler  # dicts, lists, numpy arrays only
from tff_meta.data.types import DataError

SPLITS = (('train', 'train'), ('validation', 'val'), ('test', 'test'))
TITLES = {'mini_imagenet': 'miniImageNet', 'tiered_imagenet': 'tieredImageNet'}


def _expected(title: str) -> str:
  return ('mini-imagenet-cache-{train,val,test}.pkl or {train,val,test}.pkl (image_data + '
          'class_dict, or images + labels), or {train,val,test}.csv (filename,label) with '
          f'the images in images/ ({title} in the Ravi & Larochelle split)')


def _read_pickle(path: str) -> Tuple[np.ndarray, List[str]]:
  try:
    with open(path, 'rb') as f:
      raw = ArrayUnpickler(f, encoding='latin1').load()
  except Exception as e:  # pickle raises many types on corrupt input.
    raise DataError(f'{path}: not a readable image pickle ({type(e).__name__}: {e}).') from e
  if not isinstance(raw, dict):
    raise DataError(f'{path}: expected a dict, found {type(raw).__name__}.')
  if 'image_data' in raw and 'class_dict' in raw:
    images = np.asarray(raw['image_data'])
    labels = np.empty(len(images), object)
    for name, rows in raw['class_dict'].items():
      labels[np.asarray(rows, int)] = str(name)
  elif 'images' in raw and 'labels' in raw:
    images, labels = np.asarray(raw['images']), np.asarray(raw['labels']).astype(str)
  else:
    raise DataError(f'{path}: has keys {sorted(raw)}; expected image_data + class_dict '
                    'or images + labels.')
  if images.ndim != 4 or len(images) != len(labels) or any(v is None for v in labels):
    raise DataError(f'{path}: images {images.shape} do not match {len(labels)} labels.')
  return images, list(labels)


def _read_csv(folder: str, path: str) -> Tuple[np.ndarray, List[str]]:
  from PIL import Image  # pylint: disable=g-import-not-at-top
  images, labels = [], []
  with open(path, newline='') as f:
    for lineno, row in enumerate(csv.DictReader(f), start=2):
      if 'filename' not in row or 'label' not in row:
        raise DataError(f'{path}: needs a header "filename,label".')
      image_path = os.path.join(folder, 'images', row['filename'])
      try:
        with open(image_path, 'rb') as img:
          images.append(np.asarray(Image.open(io.BytesIO(img.read())).convert('RGB')))
      except OSError as e:
        raise DataError(f'{path}, line {lineno}: cannot read image {image_path} ({e}).') from e
      labels.append(row['label'])
  shapes = {im.shape for im in images}
  if len(shapes) != 1:
    raise DataError(f'{path}: images have different sizes {sorted(shapes)[:3]}; resize them '
                    '(84x84 is the usual size).')
  return np.stack(images), labels


def _read_split(folder: str, file_split: str):
  for name in (f'mini-imagenet-cache-{file_split}.pkl', f'{file_split}.pkl'):
    if os.path.isfile(os.path.join(folder, name)):
      return _read_pickle(os.path.join(folder, name))
  if os.path.isfile(os.path.join(folder, f'{file_split}.csv')):
    return _read_csv(folder, os.path.join(folder, f'{file_split}.csv'))
  return None


def load_split_folder(name: str, path: Optional[str]):
  """Reads `name` ('mini_imagenet' or 'tiered_imagenet') from `path`.

  Returns (x float32 [n, h, w, 3], y int32 [n], part -> class ids, description).
  """
  title = TITLES[name]
  if not path:
    raise DataError(f'{title} needs its folder: set [data] path in the config or pass '
                    f'--data_path=FOLDER. The folder must hold {_expected(title)}.')
  folder = os.path.expanduser(path)
  if not os.path.isdir(folder):
    raise DataError(f'{title} folder {path!r} does not exist. Download {title} and put '
                    f'{_expected(title)} there, or pass --data_path=FOLDER.')
  xs, ys, classes, offset = [], [], collections.OrderedDict(), 0
  for part, file_split in SPLITS:
    found = _read_split(folder, file_split)
    if found is None:
      raise DataError(f'{title} split {file_split!r} not found in {folder}; expected '
                      f'{_expected(title)}.')
    images, labels = found
    names = sorted(set(labels))
    ids = np.searchsorted(names, labels) + offset
    classes[part] = np.arange(offset, offset + len(names))
    offset += len(names)
    xs.append(images.astype(np.float32) / 255.0 if images.dtype == np.uint8 else
              images.astype(np.float32))
    ys.append(ids.astype(np.int32))
  x, y = np.concatenate(xs), np.concatenate(ys)
  return x, y, classes, f'{title} from {folder} ({len(y)} images, {offset} classes)'
