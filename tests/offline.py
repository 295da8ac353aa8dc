"""Tests never use the network: TFF's download helper, as the tests and their programs have it."""

import os

from tensorflow_federated.python.simulation.datasets import download


def tff_downloads_refused(get_compressed_file, error):
  """TFF's download helper as tests have it: a file already in the folder is returned (TFF's
  loaders ask the helper for every file), a fetch raises `error` instead: tests never use the
  network (tests/data/test_tff_download.py serves fixture files on purpose)."""
  def present_only(origin, cache_dir=None):
    folder = cache_dir or os.path.join(os.path.expanduser('~'), '.tff')
    if not os.path.isfile(os.path.join(folder, os.path.splitext(download.url_basename(origin))[0])):
      raise error(f'a test tried to download {origin} into {folder}')
    return get_compressed_file(origin, cache_dir)
  return present_only
