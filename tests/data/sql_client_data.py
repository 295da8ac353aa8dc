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
