"""A TFF dataset file missing from cache_dir is fetched with TFF's own download helper.

TFF's helper (`tff.simulation.datasets`' `download.get_compressed_file`) is replaced by one
that serves a fixture file through the real helper from a file:// URL (TFF's own lzma
decompression and progress bar), or by one that fails; the network is never used.
"""

import inspect
import lzma
import os
import shutil
import urllib.error

import numpy as np
import pytest
from tensorflow_federated.python.simulation.datasets import download

from tests.conftest import FIXTURES, TFF_GET_COMPRESSED_FILE
from tff_meta.data import load_dataset, tff_native, tff_sqlite
from tff_meta.data.types import DataError
from tff_meta.classification import config as config_lib

TFF_DIR = os.path.join(FIXTURES, 'tff')


@pytest.fixture
def served(tmp_path, monkeypatch):
  """TFF's helper, fetching `<file>.lzma` URLs from a folder of lzma-packed fixtures instead."""
  packed = tmp_path / 'served'
  packed.mkdir()
  for name in ('emnist_all.sqlite', 'shakespeare.sqlite'):
    with open(os.path.join(TFF_DIR, name), 'rb') as src:
      (packed / f'{name}.lzma').write_bytes(lzma.compress(src.read(), preset=0))
  origins = []
  real = TFF_GET_COMPRESSED_FILE

  def fake(origin, cache_dir=None):
    origins.append(origin)
    return real(origin=f'file://{packed}/{download.url_basename(origin)}', cache_dir=cache_dir)
  monkeypatch.setattr(download, 'get_compressed_file', fake)
  return origins


def _fails_after_writing_part(monkeypatch, error):
  """TFF's helper, writing half a file where it writes the whole one, then raising `error`."""
  def fake(origin, cache_dir=None):
    with open(os.path.join(cache_dir, download.url_basename(origin)[:-len('.lzma')]), 'wb') as f:
      f.write(b'SQLite format 3\x00' + b'\x00' * 4096)
    raise error
  monkeypatch.setattr(download, 'get_compressed_file', fake)


def test_the_urls_are_the_ones_tffs_loaders_download():
  from tensorflow_federated.python.simulation.datasets import (  # pylint: disable=g-multiple-import
      cifar100, emnist, shakespeare, stackoverflow)
  for module, filename in ((emnist, 'emnist_all.sqlite'), (shakespeare, 'shakespeare.sqlite'),
                           (cifar100, 'cifar100.sqlite'), (stackoverflow, 'stackoverflow.sqlite')):
    assert f"'{tff_sqlite.download_url(filename)}'" in inspect.getsource(module.load_data)


def test_a_missing_file_is_downloaded_and_read(tmp_path, served, capfd):
  folder = tmp_path / 'home' / '.tff'   # missing, as on a first run
  got = tff_native.load_emnist(str(folder), only_digits=True)
  assert served == [tff_sqlite.download_url('emnist_all.sqlite')]
  assert sorted(os.listdir(folder)) == ['emnist_all.sqlite']   # no staging folder left
  want = tff_native.load_emnist(TFF_DIR, only_digits=True)
  assert sorted(got.clients) == sorted(want.clients)
  for cid in want.clients:
    np.testing.assert_array_equal(got.clients[cid].x, want.clients[cid].x)
  err = capfd.readouterr().err
  assert f'note: {folder}/emnist_all.sqlite is missing; downloading ' in err
  assert 'Downloading emnist_all.sqlite.lzma' in err   # TFF's own progress bar
  tff_native.load_emnist(str(folder), only_digits=True)   # now present: nothing fetched
  assert len(served) == 1


def test_registry_and_repartition_options_reach_the_download(tmp_path, served):
  load_dataset('shakespeare', cache_dir=str(tmp_path), max_clients=2)
  assert served == [tff_sqlite.download_url('shakespeare.sqlite')]
  with pytest.raises(DataError, match='not found'):
    load_dataset('emnist_label_shards', cache_dir=str(tmp_path), download=False)
  assert served == [tff_sqlite.download_url('shakespeare.sqlite')]


@pytest.mark.parametrize('error', [
    urllib.error.URLError(OSError(-3, 'Temporary failure in name resolution')),
    lzma.LZMAError('Input format not supported by decoder'),
])
def test_a_failed_download_is_one_error_and_leaves_nothing(tmp_path, monkeypatch, error):
  _fails_after_writing_part(monkeypatch, error)
  folder = tmp_path / 'a' / 'tff'   # missing, with its parent
  with pytest.raises(DataError) as e:
    tff_native.load_emnist(str(folder))
  message = str(e.value)
  assert f'could not download {tff_sqlite.download_url("emnist_all.sqlite")} into ' in message
  assert f'to {str(folder / "emnist_all.sqlite")!r}' in message   # where to copy the file
  assert str(error.reason if hasattr(error, 'reason') else error) in message
  assert os.listdir(tmp_path) == []   # the folders it made are gone too
  existing = tmp_path / 'tff'
  existing.mkdir()
  (existing / 'other.txt').write_text('kept')
  with pytest.raises(DataError):
    tff_native.load_emnist(str(existing))
  assert os.listdir(existing) == ['other.txt']


def test_a_download_that_is_not_a_tff_sqlite_file_is_not_kept(tmp_path, monkeypatch):
  def fake(origin, cache_dir=None):
    path = os.path.join(cache_dir, 'emnist_all.sqlite')
    shutil.copy(os.path.join(TFF_DIR, 'shakespeare.sqlite'), path)   # a sqlite file, but...
    with open(path, 'r+b') as f:
      f.truncate(1000)   # ... cut short
    return path
  monkeypatch.setattr(download, 'get_compressed_file', fake)
  with pytest.raises(DataError, match='could not download'):
    tff_native.load_emnist(str(tmp_path))
  assert os.listdir(tmp_path) == []


def test_offline_with_tffs_real_helper(tmp_path, monkeypatch):
  # .invalid never resolves (RFC 2606): TFF's real urlopen fails as offline.
  monkeypatch.setattr(tff_sqlite, 'TFF_DATASETS_URL', 'http://tff-meta-test.invalid/')
  monkeypatch.setattr(download, 'get_compressed_file', TFF_GET_COMPRESSED_FILE)
  with pytest.raises(DataError, match=r'could not download http://tff-meta-test\.invalid/'
                                      r'shakespeare\.sqlite\.lzma'):
    tff_native.load_shakespeare(str(tmp_path))
  assert os.listdir(tmp_path) == []


def test_download_false_keeps_the_offline_error(tmp_path, monkeypatch):
  _fails_after_writing_part(monkeypatch, AssertionError('no download with download=False'))
  with pytest.raises(DataError, match='TFF dataset file not found'):
    tff_native.load_tff_cifar100(str(tmp_path), download=False)
  assert os.listdir(tmp_path) == []


def test_no_download_flag_sets_the_loader_option_where_there_is_one():
  cfg = config_lib.ExperimentConfig(dataset='emnist', data={'cache_dir': '/data'})
  assert config_lib.apply_overrides(cfg, {'no_download': True}).data == {
      'cache_dir': '/data', 'download': False}
  assert config_lib.apply_overrides(cfg, {'no_download': False}).data == {'cache_dir': '/data'}
  assert config_lib.apply_overrides(cfg, {}).data == {'cache_dir': '/data'}
  # digits is embedded and downloads nothing; leaf_femnist reads a folder
  for name in ('digits', 'leaf_femnist'):
    assert 'download' not in config_lib.apply_overrides(
        cfg, {'dataset': name, 'no_download': True}).data
