"""A CA and the certificates of one worker pool, written with the `cryptography` package.

    make_pool_certs('pool_certs', ['host1', 'host2'])

writes into the folder:

| file | what it is |
|---|---|
| `ca.crt`, `ca.key` | the pool's own CA; keep `ca.key` off the workers and the trainer |
| `worker.crt`, `worker.key` | every worker's certificate (server auth), naming every host, localhost and 127.0.0.1 |
| `trainer.crt`, `trainer.key` | the trainer's certificate (client auth) |

Keys are ECDSA P-256, written atomically with mode 0600 (readable by the
owner only) before any byte of the key is written. Existing files are
never overwritten: a CA replaced by mistake would lock out every worker.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import Dict, Sequence

from tff_meta.core import files

CA_NAME = 'tff_meta worker pool CA'
FILES = ('ca.crt', 'ca.key', 'worker.crt', 'worker.key', 'trainer.crt', 'trainer.key')


def _name(common_name: str):
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  from cryptography.x509.oid import NameOID  # pylint: disable=g-import-not-at-top
  return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alt_name(host: str):
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  try:
    return x509.IPAddress(ipaddress.ip_address(host))
  except ValueError:
    return x509.DNSName(host)


def _certificate(subject: str, key, issuer_name, issuer_key, days: int, *, ca: bool = False,
                 hosts: Sequence[str] = (), client: bool = False):
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives import hashes  # pylint: disable=g-import-not-at-top
  from cryptography.x509.oid import ExtendedKeyUsageOID  # pylint: disable=g-import-not-at-top
  now = datetime.datetime.now(datetime.timezone.utc)
  builder = (x509.CertificateBuilder()
             .subject_name(_name(subject)).issuer_name(issuer_name)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=days))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None),
                            critical=True))
  if ca:
    builder = builder.add_extension(x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False), critical=True)
  else:
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
  if hosts:
    builder = builder.add_extension(
        x509.SubjectAlternativeName([_alt_name(h) for h in hosts]), critical=False)
  return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key) -> bytes:
  from cryptography.hazmat.primitives import serialization  # pylint: disable=g-import-not-at-top
  return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def _pem_cert(cert) -> bytes:
  from cryptography.hazmat.primitives import serialization  # pylint: disable=g-import-not-at-top
  return cert.public_bytes(serialization.Encoding.PEM)


def check_hosts(hosts: Sequence[str]) -> list:
  """The host names or IP addresses for the workers' certificate; ValueError if none or bad."""
  out = [h.strip() for h in hosts if h.strip()]
  if not out:
    raise ValueError('--hosts needs the workers\' host names or IP addresses (comma-separated), '
                     'as the trainer will name them in --workers.')
  for h in out:
    if ':' in h and not _is_ip(h) or any(c.isspace() or c in '/,' for c in h):
      raise ValueError(f'--hosts: {h!r} is not a host name or IP address (no port).')
  return out


def _is_ip(text: str) -> bool:
  try:
    ipaddress.ip_address(text)
    return True
  except ValueError:
    return False


def make_pool_certs(folder: str, hosts: Sequence[str], days: int = 365) -> Dict[str, str]:
  """Writes the pool's CA and certificates (module docstring); returns {file name: path}.

  FileExistsError if any of the files is already in `folder` (nothing is written then).
  """
  from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=g-import-not-at-top
  hosts = check_hosts(hosts)
  if days < 1:
    raise ValueError(f'--cert_days must be >= 1, got {days}.')
  paths = {name: os.path.join(folder, name) for name in FILES}
  existing = [p for p in paths.values() if os.path.exists(p)]
  if existing:
    raise FileExistsError(f'{", ".join(existing)} already exist(s); certificates are never '
                          'overwritten. Choose another folder, or delete the old pool\'s files.')
  os.makedirs(folder, mode=0o700, exist_ok=True)
  ca_key = ec.generate_private_key(ec.SECP256R1())
  ca_cert = _certificate(CA_NAME, ca_key, _name(CA_NAME), ca_key, days, ca=True)
  worker_key = ec.generate_private_key(ec.SECP256R1())
  names = list(dict.fromkeys(list(hosts) + ['localhost', '127.0.0.1']))
  worker_cert = _certificate('tff_meta worker', worker_key, ca_cert.subject, ca_key, days,
                             hosts=names)
  trainer_key = ec.generate_private_key(ec.SECP256R1())
  trainer_cert = _certificate('tff_meta trainer', trainer_key, ca_cert.subject, ca_key, days,
                              client=True)
  contents = {'ca.key': _pem_key(ca_key), 'ca.crt': _pem_cert(ca_cert),
              'worker.key': _pem_key(worker_key), 'worker.crt': _pem_cert(worker_cert),
              'trainer.key': _pem_key(trainer_key), 'trainer.crt': _pem_cert(trainer_cert)}
  for name, data in contents.items():
    with files.atomic_open(paths[name], 'wb') as f:
      if name.endswith('.key'):
        os.fchmod(f.fileno(), 0o600)   # before the key's first byte
      f.write(data)
  return paths
