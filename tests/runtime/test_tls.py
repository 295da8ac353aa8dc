"""Mutual TLS worker pools on loopback: certificates, refused strangers, the documented commands."""

import csv
import os
import re
import subprocess
import time
import sys

import grpc
import portpicker
import pytest

from tests import helpers
from tests.conftest import REPO
from tests.runtime import tls_helpers
from tff_meta.runtime import cert_files, netns, tls
from tff_meta.runtime.pool import WorkerPool, WorkerUnavailableError

DEPLOY_DOC = os.path.join(REPO, 'docs', 'DEPLOY.md')


@pytest.fixture(scope='module')
def pools(tmp_path_factory):
  """Two pools' certificates: 'ours' (the worker's pool) and 'other' (another CA)."""
  root = tmp_path_factory.mktemp('certs')
  cert_files.make_pool_certs(str(root / 'ours'), ['localhost'])
  cert_files.make_pool_certs(str(root / 'other'), ['localhost'])
  return root


def _load(certs, side):
  return tls.TlsFiles.load(f'{certs}/ca.crt', f'{certs}/{side}.crt', f'{certs}/{side}.key',
                           'workers_tls_')


def test_make_pool_certs_writes_private_keys_and_names_the_hosts(tmp_path):
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  paths = cert_files.make_pool_certs(str(tmp_path / 'c'), ['host1', '10.59.0.2'], days=3)
  assert sorted(os.listdir(tmp_path / 'c')) == sorted(cert_files.FILES)   # no temp files left
  for name, path in paths.items():
    mode = os.stat(path).st_mode & 0o777
    assert (mode == 0o600) if name.endswith('.key') else (mode & 0o077 != 0), (name, oct(mode))
  with open(paths['worker.crt'], 'rb') as f:
    cert = x509.load_pem_x509_certificate(f.read())
  names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
  assert names.get_values_for_type(x509.DNSName) == ['host1', 'localhost']
  assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ['10.59.0.2', '127.0.0.1']
  assert _load(tmp_path / 'c', 'trainer') and _load(tmp_path / 'c', 'worker')
  before = {p: open(p, 'rb').read() for p in paths.values()}
  with pytest.raises(FileExistsError, match='never overwritten'):
    cert_files.make_pool_certs(str(tmp_path / 'c'), ['host1'])
  assert before == {p: open(p, 'rb').read() for p in paths.values()}


@pytest.mark.parametrize('hosts', [[], [''], ['host:8000'], ['a b']])
def test_make_pool_certs_refuses_bad_hosts(tmp_path, hosts):
  with pytest.raises(ValueError, match='--hosts'):
    cert_files.make_pool_certs(str(tmp_path / 'c'), hosts)
  assert not (tmp_path / 'c').exists()


def test_tls_files_name_the_problem(pools):
  ours, other = pools / 'ours', pools / 'other'
  assert tls.TlsFiles.load(None, None, None, 'workers_tls_') is None
  with pytest.raises(tls.TlsError, match='--workers_tls_key as well'):
    tls.TlsFiles.load(f'{ours}/ca.crt', f'{ours}/trainer.crt', None, 'workers_tls_')
  with pytest.raises(tls.TlsError, match='not the key of certificate'):
    tls.TlsFiles.load(f'{ours}/ca.crt', f'{ours}/trainer.crt', f'{ours}/worker.key', 'x')
  with pytest.raises(tls.TlsError, match='was not signed by the CA'):
    tls.TlsFiles.load(f'{ours}/ca.crt', f'{other}/trainer.crt', f'{other}/trainer.key', 'x')
  with pytest.raises(tls.TlsError, match='missing.crt: No such file'):
    tls.TlsFiles.load(f'{ours}/missing.crt', f'{ours}/trainer.crt', f'{ours}/trainer.key', 'x')
  with pytest.raises(tls.TlsError, match='not a PEM file'):
    tls.TlsFiles.load(os.path.join(REPO, 'README.md'), f'{ours}/trainer.crt',
                      f'{ours}/trainer.key', 'x')


@pytest.mark.parametrize('address,loopback', [
    ('localhost:8000', True), ('127.0.0.1:1', True), ('127.8.9.10:1', True), ('[::1]:8000', True),
    ('host1:8000', False), ('10.59.0.2:8443', False), ('[2001:db8::1]:80', False)])
def test_is_loopback(address, loopback):
  assert tls.is_loopback(address) == loopback


def test_plain_grpc_beyond_loopback_is_warned(capsys):
  tls.warn_plain(['localhost:8000', '127.0.0.1:8001'])
  assert capsys.readouterr().err == ''
  tls.warn_plain(['localhost:8000', 'host2:8000'])
  err = capsys.readouterr().err
  assert err.startswith('warning: plain gRPC to host2:8000:') and '--workers_tls_ca' in err


@pytest.mark.slow
def test_tls_worker_admits_only_the_pools_certificates(pools, tmp_path):
  """No certificate, another CA's, or plain gRPC: refused, and the worker runs nothing."""
  ours, other = pools / 'ours', pools / 'other'
  worker = tls_helpers.TlsWorker(ours, portpicker.pick_unused_port(), log=tmp_path / 'w.log')
  try:
    address = 'localhost:' + re.search(r'port (\d+)', worker.banner).group(1)
    if netns.available():   # the executor's plain port is in a network of its own
      assert 'its own network namespace' in worker.banner
      assert (os.readlink(f'/proc/{worker.executor_pid}/ns/net') !=
              os.readlink('/proc/self/ns/net'))
    with open(f'{ours}/ca.crt', 'rb') as f:
      ca = f.read()
    strangers = {
        'plain gRPC': grpc.insecure_channel(address),
        'no certificate': grpc.secure_channel(address, grpc.ssl_channel_credentials(ca)),
        'another CA': tls.open_channel(address, _load(other, 'trainer')),
        'the worker\'s own certificate': tls.open_channel(address, _load(ours, 'worker')),
    }
    for who, channel in strangers.items():
      mark = tmp_path / f'{who}.ran'
      assert tls_helpers.refused(channel, tls_helpers.marker_computation(str(mark))), who
      assert not mark.exists(), who
      channel.close()
    with pytest.raises(WorkerUnavailableError, match='over mutual TLS'):
      WorkerPool([address], ready_timeout_s=2, tls=_load(other, 'trainer'))
    # The same computation with the trainer's certificate runs (so the checks above can fail).
    channel = tls.open_channel(address, _load(ours, 'trainer'))
    mark = tmp_path / 'trainer.ran'
    assert tls_helpers.run_on(channel, tls_helpers.marker_computation(str(mark))) == 1
    assert mark.read_text() == 'ran'
    channel.close()
  finally:
    worker.stop()
  assert not helpers.alive(worker.executor_pid)


def _documented_commands():
  """The commands of DEPLOY.md's "Try it on one machine" block under "Mutual TLS"."""
  with open(DEPLOY_DOC) as f:
    text = f.read()
  section = text.split('\n## Mutual TLS', 1)[1].split('\n## ', 1)[0]
  block = section.split('Try it on one machine', 1)[1].split('```', 2)[1]
  return [line.strip() for line in block.splitlines() if line.strip().startswith('.venv/')]


def _swap(command, certs, ports):
  """A documented command with this test's python, certificate folder and ports."""
  command = command.replace('.venv/bin/python', sys.executable).replace('pool_certs', str(certs))
  for documented, port in ports.items():
    command = command.replace(f':{documented}', f':{port}').replace(f'={documented}', f'={port}')
  return command.split()


def _losses(run):
  with open(run / 'metrics.csv', newline='') as f:
    return [float(r['train_loss']) for r in csv.DictReader(f)]


@pytest.mark.slow
def test_documented_tls_commands_train_like_local_workers(tmp_path):
  """DEPLOY.md's commands: make the certificates, 2 TLS workers, the trainer over TLS."""
  make, worker1, worker2, train = _documented_commands()
  certs = tmp_path / 'pool_certs'
  ports = {8443: portpicker.pick_unused_port(), 8444: portpicker.pick_unused_port()}
  made = subprocess.run(_swap(make, certs, ports), cwd=REPO, env=helpers.program_env(),
                        capture_output=True, text=True, timeout=300)
  assert made.returncode == 0, made.stderr[-2000:]
  assert os.stat(certs / 'trainer.key').st_mode & 0o777 == 0o600
  workers = []
  try:
    for command in (worker1, worker2):
      args = _swap(command, certs, ports)
      port = next(int(a.split('=')[1]) for a in args if a.startswith('--port='))
      workers.append(tls_helpers.TlsWorker(certs, port, log=tmp_path / f'w{port}.log'))
      assert args[1:] == ['-m', 'programs.worker', f'--port={port}'] + tls_helpers.tls_flags(certs)
    short = ['--rounds=3', '--eval_every=3', '--checkpoint_every=3', '--progress=false']
    run = subprocess.run(_swap(train, certs, ports) + short + [f'--output_dir={tmp_path / "tls"}'],
                         cwd=REPO, env=helpers.program_env(), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert 'warning: plain gRPC' not in run.stderr
  finally:
    for w in workers:
      w.stop()
  local = [a for a in _swap(train, certs, ports) if not a.startswith('--work')]
  local = [a if a != '--executor=workers' else '--executor=local' for a in local]
  plain = subprocess.run(local + ['--local_workers=2'] + short +
                         [f'--output_dir={tmp_path / "local"}'], cwd=REPO,
                         env=helpers.program_env(), capture_output=True, text=True, timeout=600)
  assert plain.returncode == 0, plain.stderr[-3000:]
  assert _losses(tmp_path / 'tls') == pytest.approx(_losses(tmp_path / 'local'), rel=1e-5)
  assert len(_losses(tmp_path / 'tls')) == 3


@pytest.fixture(scope='module')
def runner():
  from tests.programs.program_client import Runner  # pylint: disable=g-import-not-at-top
  r = Runner()
  yield r
  r.close()


def test_bad_tls_input_is_one_error_line(runner, pools, tmp_path):
  """Partial flags, missing files, bad hosts, an existing pool, a busy port: `error:`, exit 1."""
  from tests.programs.program_client import assert_clean_error, snapshot  # pylint: disable=g-import-not-at-top
  ours = pools / 'ours'
  worker_tls = tls_helpers.tls_flags(ours)
  before = snapshot(str(ours))
  cases = [
      ('programs.worker', worker_tls[:1], '--tls_cert, --tls_key as well'),
      ('programs.worker', [f'--tls_ca={tmp_path}/no.crt'] + worker_tls[1:], 'no.crt: No such file'),
      ('programs.worker', [f'--tls_ca={ours}/ca.crt', f'--tls_cert={ours}/trainer.crt',
                           f'--tls_key={ours}/worker.key'], 'is not the key of certificate'),
      ('programs.worker', [f'--make_certs={tmp_path}/new'], '--hosts needs'),
      ('programs.worker', [f'--make_certs={ours}', '--hosts=localhost'], 'never overwritten'),
      ('programs.train', ['--config=configs/demo/digits.toml', '--executor=workers',
                          '--workers=localhost:1', f'--workers_tls_ca={ours}/ca.crt'],
       '--workers_tls_cert, --workers_tls_key as well'),
      ('programs.train', ['--config=configs/demo/digits.toml', f'--workers_tls_ca={ours}/ca.crt'],
       'only used with --executor=workers'),
  ]
  for module, args, expect in cases:
    assert_clean_error(runner.run(module, *args, f'--output_dir={tmp_path}/out'
                                  if module == 'programs.train' else '--port=1'), expect)
  assert snapshot(str(ours)) == before
  assert not os.path.exists(tmp_path / 'new')
  with socket_on_a_port() as port:
    assert_clean_error(runner.run('programs.worker', f'--port={port}', *worker_tls),
                       f'port {port} is already in use')


class socket_on_a_port:  # pylint: disable=invalid-name
  """A listening socket on a free port, so that the port is busy."""

  def __enter__(self):
    import socket  # pylint: disable=g-import-not-at-top
    self._socket = socket.socket(socket.AF_INET6)
    self._socket.bind(('::', 0))
    self._socket.listen(1)
    return self._socket.getsockname()[1]

  def __exit__(self, *exc):
    self._socket.close()


@pytest.mark.slow
def test_tls_worker_without_cap_sys_admin_warns_and_serves(pools, tmp_path):
  """As in a container: no network of its own for the executor, a warning naming its port."""
  import shutil  # pylint: disable=g-import-not-at-top
  if os.geteuid() != 0 or shutil.which('capsh') is None:
    pytest.skip('needs root and capsh (libcap2-bin) to drop CAP_SYS_ADMIN')
  ours = pools / 'ours'
  port = portpicker.pick_unused_port()
  worker = tls_helpers.TlsWorker(ours, port, prefix=['capsh', '--drop=cap_sys_admin', '--', '-c',
                                                     'exec "$0" "$@"'], log=tmp_path / 'w.log')
  try:
    assert 'its own network namespace' not in worker.banner
    assert (os.readlink(f'/proc/{worker.executor_pid}/ns/net') ==
            os.readlink('/proc/self/ns/net'))
    inner = re.search(r'on port (\d+)\); log', worker.banner).group(1)
    warning = f'its plain port {inner} listens on every interface. Let only port {port} be reached'
    deadline = time.monotonic() + 30   # the worker's stderr reaches its log file a moment later
    while warning not in ' '.join(worker.log_text().split()) and time.monotonic() < deadline:
      time.sleep(0.1)
    assert warning in ' '.join(worker.log_text().split()), worker.log_text()[-2000:]
    channel = tls.open_channel(f'localhost:{port}', _load(ours, 'trainer'))
    assert tls_helpers.run_on(channel, tls_helpers.marker_computation(str(tmp_path / 'm'))) == 1
    channel.close()
  finally:
    worker.stop()
  assert not helpers.alive(worker.executor_pid)
