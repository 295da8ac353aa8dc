"""TFF SqlClientData files written for the tests, and the missing-file check of their loaders."""

import os
import shutil
import sqlite3

import pytest
import tensorflow as tf
import tensorflow_federated as tff

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


def check_missing_sqlite_error(loader, folder, filename):
  """`loader(folder, download=False)` without the file: a DataError naming file, folder and fix;
  nothing created. (The download path: tests/data/test_tff_download.py.)"""
  with pytest.raises(DataError) as e:
    loader(str(folder), download=False)
  msg = str(e.value)
  assert os.path.join(str(folder), filename) in msg
  assert 'does not exist' in msg and 'tff.simulation.datasets' in msg
  assert f'copy an existing {filename}' in msg
  assert not folder.exists()  # Nothing was downloaded or created.


def write_emnist_file(folder, num_clients, images, bad_client=None, pixel=None, label=None,
                      bad_image=2, test_images=1):
  """An EMNIST-format `folder/emnist_all.sqlite`: clients w00, w01, ... of `images` random
  images each (the last `test_images` in all_test); `bad_client`'s image `bad_image` gets
  `pixel` at (2, 2) or label `label`. Returns the file's path."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  splits = {'all_train': {}, 'all_test': {}}
  cut = images - test_images
  for i in range(num_clients):
    cid = f'w{i:02d}'
    pixels = rng.uniform(0, 1, (images, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 62, images).astype(np.int32)
    if cid == bad_client:
      if pixel is not None:
        pixels[bad_image, 2, 2] = pixel
      if label is not None:
        labels[bad_image] = label
    splits['all_train'][cid] = {'pixels': pixels[:cut], 'label': labels[:cut]}
    splits['all_test'][cid] = {'pixels': pixels[cut:], 'label': labels[cut:]}
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, 'emnist_all.sqlite')
  write_sql_client_data(path, splits)
  return path
