"""Mutual TLS for worker pools: a pool's certificates, the trainer's channels, the worker's front.

TFF's `worker_binary` serves plain gRPC and has no TLS option (its only
flags are the port and the call bound). A worker started with TLS therefore
runs it on a loopback port and puts gRPC's own TLS in front of it
(`TlsFront`): a gRPC server with `ssl_server_credentials(...,
require_client_auth=True)` that admits a connection only if the client shows
a certificate the pool's CA signed, and then hands each executor call
(`tensorflow_federated.v0.ExecutorGroup`, all unary) to the worker unchanged,
as bytes. The trainer connects with `grpc.secure_channel` and its own
certificate (`ClientTls`); TFF's `RemoteExecutorGrpcStub` takes any channel.

Debian's stunnel cannot be the front: it negotiates no ALPN, and gRPC's TLS
client refuses a server that does not select "h2" ("Cannot check peer:
missing selected ALPN property").

`make_pool_certs` (cert_files.py) writes a CA and the certificates of a pool.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import ipaddress
import sys
import threading
from typing import Optional

import grpc

from tff_meta.runtime.workers import GRPC_OPTIONS

EXECUTOR_SERVICE = '/tensorflow_federated.v0.ExecutorGroup/'
_NO_DEADLINE_S = 1e9


class TlsError(ValueError):
  """A certificate or key is missing, unreadable, or does not fit the pool; names the file."""


def _read(path: str, what: str) -> bytes:
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as e:
    raise TlsError(f'{what} {path}: {e.strerror}.') from None
  if b'-----BEGIN ' not in data:
    raise TlsError(f'{what} {path} is not a PEM file.')
  return data


@dataclasses.dataclass(frozen=True)
class TlsFiles:
  """The PEM bytes of one side of a pool: the pool's CA, this side's certificate and key."""
  ca: bytes
  cert: bytes
  key: bytes

  @classmethod
  def load(cls, ca: Optional[str], cert: Optional[str], key: Optional[str],
           flag_prefix: str) -> Optional['TlsFiles']:
    """Reads the three files; None if none is given. `flag_prefix` names the flags in errors."""
    given = {'ca': ca, 'cert': cert, 'key': key}
    if not any(given.values()):
      return None
    missing = [f'--{flag_prefix}{k}' for k, v in given.items() if not v]
    if missing:
      raise TlsError(f'mutual TLS needs {", ".join(missing)} as well (the pool\'s CA, this '
                     'side\'s certificate and key; make them with python -m programs.worker '
                     '--make_certs=DIR --hosts=...).')
    files = cls(_read(ca, 'CA certificate'), _read(cert, 'certificate'),
                _read(key, 'private key'))
    check_pair(files, ca, cert, key)
    return files


def check_pair(files: TlsFiles, ca_path: str, cert_path: str, key_path: str) -> None:
  """TlsError unless the key is the certificate's and the pool's CA signed the certificate.

  gRPC reports neither case usefully (the handshake just fails), so both are
  checked here, before any connection.
  """
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  from cryptography.exceptions import InvalidSignature  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives import serialization  # pylint: disable=g-import-not-at-top
  try:
    ca = x509.load_pem_x509_certificate(files.ca)
  except ValueError:
    raise TlsError(f'CA certificate {ca_path} is not a PEM certificate.') from None
  try:
    cert = x509.load_pem_x509_certificate(files.cert)
  except ValueError:
    raise TlsError(f'certificate {cert_path} is not a PEM certificate.') from None
  try:
    key = serialization.load_pem_private_key(files.key, password=None)
  except (ValueError, TypeError):
    raise TlsError(f'private key {key_path} is not an unencrypted PEM private key.') from None
  raw = serialization.PublicFormat.SubjectPublicKeyInfo
  if (key.public_key().public_bytes(serialization.Encoding.DER, raw) !=
      cert.public_key().public_bytes(serialization.Encoding.DER, raw)):
    raise TlsError(f'private key {key_path} is not the key of certificate {cert_path}.')
  try:
    cert.verify_directly_issued_by(ca)
  except (ValueError, TypeError, InvalidSignature) as e:   # another issuer; a bad signature
    raise TlsError(f'certificate {cert_path} was not signed by the CA {ca_path} '
                   f'({type(e).__name__}); make both with the same --make_certs.') from None


def is_loopback(address: str) -> bool:
  """Whether host:port names this machine's loopback (localhost, 127.0.0.0/8, ::1)."""
  host = address.rpartition(':')[0].strip('[]')
  if host == 'localhost':
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def open_channel(address: str, tls: Optional[TlsFiles] = None) -> grpc.Channel:
  """A gRPC channel to a worker: mutual TLS with `tls` (the trainer's files), else plain."""
  if tls is None:
    return grpc.insecure_channel(address, GRPC_OPTIONS)
  credentials = grpc.ssl_channel_credentials(
      root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert)
  return grpc.secure_channel(address, credentials, GRPC_OPTIONS)


def warn_plain(addresses) -> None:
  """The warning for plain gRPC to workers beyond loopback."""
  remote = [a for a in addresses if not is_loopback(a)]
  if remote:
    print(f'warning: plain gRPC to {", ".join(remote)}: no authentication and no encryption; '
          'anyone on the path can read the model and the clients\' data. Serve the workers with '
          'mutual TLS and pass --workers_tls_ca, --workers_tls_cert and --workers_tls_key '
          '(docs/DEPLOY.md, "Mutual TLS").', file=sys.stderr, flush=True)


class _Forward(grpc.GenericRpcHandler):
  """Hands every ExecutorGroup call to the worker behind, as bytes; other services: none."""

  def __init__(self, backend: grpc.Channel):
    self._backend = backend
    self._lock = threading.Lock()
    self.calls = 0

  def service(self, handler_call_details):
    method = handler_call_details.method
    if not method.startswith(EXECUTOR_SERVICE):
      return None   # UNIMPLEMENTED
    call = self._backend.unary_unary(method)   # no (de)serializers: bytes in, bytes out

    def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
      with self._lock:
        self.calls += 1
      remaining = context.time_remaining()   # no deadline: ~9e18 s, which gRPC cannot take
      try:
        return call(request, timeout=remaining if remaining < _NO_DEADLINE_S else None)
      except grpc.RpcError as e:
        context.abort(e.code(), e.details() or '')
    return grpc.unary_unary_rpc_method_handler(forward)


class TlsFront:
  """gRPC's TLS on `port` (every interface) in front of a plain worker at `backend`.

  A client must present a certificate signed by `tls.ca`; the handshake fails
  otherwise and no call reaches the worker. `calls` counts the calls handed on.
  """

  def __init__(self, port: int, backend: str, tls: TlsFiles, threads: int = 64):
    self._backend = grpc.insecure_channel(backend, GRPC_OPTIONS)
    self._forward = _Forward(self._backend)
    self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(threads),
                               handlers=[self._forward], options=GRPC_OPTIONS)
    credentials = grpc.ssl_server_credentials(
        [(tls.key, tls.cert)], root_certificates=tls.ca, require_client_auth=True)
    try:
      bound = self._server.add_secure_port(f'[::]:{port}', credentials)
    except RuntimeError:
      bound = 0
    if bound != port:
      self._backend.close()
      raise RuntimeError(f'cannot listen on port {port} (in use?); choose another --port.')
    self.port = port
    self._server.start()

  @property
  def calls(self) -> int:
    return self._forward.calls

  def stop(self, grace_s: float = 1.0) -> None:
    self._server.stop(grace_s).wait()
    self._backend.close()

