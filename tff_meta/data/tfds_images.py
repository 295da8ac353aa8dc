"""Image datasets read through TensorFlow Datasets (TFDS) from a TFDS `data_dir`.

`images.py` uses this module when the user names a TFDS data_dir
(`tfds_data_dir`, e.g. `[data] tfds_data_dir = "~/tensorflow_datasets"`) and
for the EMNIST configurations, which have no raw-file reader here. TFDS keeps
a prepared dataset as `<data_dir>/<name>[/<config>]/<version>/` (TFRecord
shards plus `dataset_info.json`); this module reads such a folder and, when it
is missing, prepares it offline from the original archives placed in
`<data_dir>/downloads/manual/` (TFDS's manual_dir):

  mnist, fashion_mnist: train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
    t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz (the gzipped
    originals; TFDS checks their SHA-256);
  cifar10: cifar-10-binary.tar.gz (the *binary* version; TFDS cannot read the
    python pickles, which `images.py` keeps reading itself);
  cifar100: cifar-100-binary.tar.gz;
  emnist/<config>: NIST's gzip.zip (562 MB).

Nothing is downloaded: preparation runs only when every file TFDS needs is in
the manual folder (with `try_download_gcs=False`, so TFDS does not fetch its
own prepared copy either). Otherwise `DataError` names the folder, the files
and the one command that prepares the dataset on a machine with internet.
"""

from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

import numpy as np

from tff_meta.data.types import DataError

_SPLITS = {'train': ('train',), 'test': ('test',), 'all': ('train', 'test')}
_BATCH = 4096


def default_data_dir() -> str:
  """TFDS's own default: $TFDS_DATA_DIR, else ~/tensorflow_datasets."""
  return os.environ.get('TFDS_DATA_DIR') or os.path.join(os.path.expanduser('~'),
                                                         'tensorflow_datasets')


def manual_dir(data_dir: str) -> str:
  """Where TFDS looks for manually placed original archives."""
  return os.path.join(data_dir, 'downloads', 'manual')


def has_dataset_folder(tfds_name: str, data_dir: str) -> bool:
  """True when `data_dir` has a folder for `tfds_name` (prepared or not), without importing TFDS."""
  return os.path.isdir(os.path.join(data_dir, tfds_name.split('/')[0]))


def _import_tfds():
  """tensorflow_datasets, or DataError naming what breaks it (TFDS logs and hides import errors)."""
  fix = 'install the pinned requirements: pip install --no-deps -r requirements.txt.'
  try:
    from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top,unused-import
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except Exception as e:  # pylint: disable=broad-except  # a broken install raises many types
    raise DataError(f'tensorflow-datasets cannot be imported ({type(e).__name__}: {e}); {fix}'
                    ) from e
  if not hasattr(tfds, 'builder'):
    raise DataError(f'tensorflow-datasets did not load completely (see its log above); {fix}')
  return tfds


def _first_line(e: Exception) -> str:
  """The gist of an error: its first line without TF's op decorations."""
  lines = str(e).strip().splitlines()
  text = re.sub(r'\{\{.*?\}\}|\[Op:.*$', '', lines[0]).strip() if lines else ''
  return text or type(e).__name__


def _prepare_command(tfds_name: str, data_dir: str) -> str:
  return (f'python -c "import tensorflow_datasets as tfds; tfds.builder({tfds_name!r}, '
          f'data_dir={data_dir!r}).download_and_prepare()"')


def _needed_files(builder, title: str) -> List[Tuple[str, int]]:
  """(file name, size in bytes) of each original archive the builder reads."""
  try:
    infos = type(builder).url_infos or {}
  except ImportError as e:
    raise DataError(f'tensorflow-datasets is missing a dependency ({e}); install the pinned '
                    'requirements: pip install --no-deps -r requirements.txt.') from e
  if not infos:
    raise DataError(f'TFDS has no checksum list for {title}; it cannot be prepared offline.')
  return sorted({(info.filename, int(info.size)) for info in infos.values()})


def _versions(data_path: str) -> List[str]:
  parent = os.path.dirname(data_path)
  if not os.path.isdir(parent):
    return []
  return sorted(v for v in os.listdir(parent)
                if os.path.isfile(os.path.join(parent, v, 'dataset_info.json')))


def _prepare_offline(tfds, builder, tfds_name: str, data_dir: str, title: str) -> None:
  """Builds the dataset from the originals in the manual folder, or raises DataError."""
  manual = manual_dir(data_dir)
  needed = _needed_files(builder, title)
  missing = [name for name, _ in needed if not os.path.isfile(os.path.join(manual, name))]
  if missing:
    others = _versions(str(builder.data_path))
    found = (f' (it holds version(s) {others}; this TFDS reads {builder.version})'
             if others else '')
    raise DataError(
        f'{title} is not prepared in the TFDS data_dir {data_dir}{found}: no '
        f'{builder.data_path}/dataset_info.json. Prepare it once with internet: '
        f'{_prepare_command(tfds_name, data_dir)}; or offline, put the original '
        f'{", ".join(missing)} into {manual} and run again.')
  for name, size in needed:
    path = os.path.join(manual, name)
    if os.path.getsize(path) != size:
      raise DataError(f'{path}: {os.path.getsize(path)} bytes, but the original {name} TFDS '
                      f'prepares {title} from has {size}; replace it with the original file.')
  config = tfds.download.DownloadConfig(manual_dir=manual, try_download_gcs=False)
  try:
    builder.download_and_prepare(download_config=config)
  except tfds.core.download.download_manager.NonMatchingChecksumError as e:
    bad = [n for n, _ in needed if os.path.join(manual, n) in str(e)] or [n for n, _ in needed]
    raise DataError(f'{os.path.join(manual, bad[0])}: SHA-256 differs from the original {bad[0]} '
                    f'that TFDS prepares {title} from; replace it with the original file.') from e
  except OSError as e:
    raise DataError(f'Cannot prepare {title} in the TFDS data_dir {data_dir} ({e}); it must be a '
                    'writable folder with room for the prepared copy.') from e


def load(tfds_name: str, data_dir: str, split: str, title: str,
         transpose: bool = False) -> Tuple[np.ndarray, np.ndarray, str]:
  """Reads TFDS dataset `tfds_name` from `data_dir`, preparing it offline if needed.

  Args:
    tfds_name: TFDS name, with the config for EMNIST ('emnist/byclass').
    data_dir: a TFDS data_dir (`~` is expanded).
    split: 'train', 'test' or 'all' (train then test).
    title: the dataset's name in messages.
    transpose: swap rows and columns (EMNIST is stored transposed; this
      makes its characters upright, as MNIST's digits).

  Returns:
    x uint8 [n, H, W] (grey) or [n, H, W, 3] (RGB), y int32 [n], and the
    folder read (`<data_dir>/<name>/<version>`).
  """
  if split not in _SPLITS:
    raise DataError(f'split must be one of {tuple(_SPLITS)}, got {split!r}.')
  data_dir = os.path.expanduser(data_dir)
  if not os.path.isdir(data_dir):
    raise DataError(f'TFDS data_dir {data_dir!r} is not a folder; give the folder that holds '
                    f'{tfds_name}/ (TFDS\'s default is ~/tensorflow_datasets).')
  tfds = _import_tfds()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  # TFDS has imported it
  try:
    builder = tfds.builder(tfds_name, data_dir=data_dir)
  except Exception as e:  # pylint: disable=broad-except  # json, protobuf, OS errors
    raise DataError(f'{os.path.join(data_dir, tfds_name)}: cannot open the prepared TFDS '
                    f'{title} ({_first_line(e)}); delete this folder and prepare it again.') from e
  if not builder.is_prepared():
    _prepare_offline(tfds, builder, tfds_name, data_dir, title)
  folder = str(builder.data_path)
  xs, ys = [], []
  try:
    for part in _SPLITS[split]:  # one at a time: TFDS interleaves the files of 'train+test'
      ds = builder.as_dataset(split=part, as_supervised=True, shuffle_files=False,
                              batch_size=_BATCH)
      for x, y in tfds.as_numpy(ds):
        xs.append(x)
        ys.append(y)
  except (tf.errors.OpError, OSError, ValueError) as e:  # missing or truncated shards
    raise DataError(f'{folder}: cannot read the prepared TFDS files ({_first_line(e)}); delete '
                    'this folder and prepare the dataset again.') from e
  x = np.concatenate(xs)
  if x.ndim == 4 and x.shape[-1] == 1:
    x = x[..., 0]
  if transpose:
    x = np.ascontiguousarray(np.swapaxes(x, 1, 2))
  return x, np.concatenate(ys).astype(np.int32), folder
