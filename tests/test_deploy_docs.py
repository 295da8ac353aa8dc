"""deploy/ and docs/DEPLOY.md agree with the programs' real flags, and with each other.

No YAML library is needed (PyYAML is not in the lock): the checks read the
files as text. A `--flag` is checked where it can be attributed:

  - after `programs.<name>` in the same command (a code line, an inline code
    span, a YAML or Dockerfile comment): against that program's flags;
  - in a YAML block (a compose service, a Kubernetes document) or a Dockerfile
    whose command is `programs.<name>`: against that program's flags;
  - an inline code span of DEPLOY.md that starts with `--`, and our programs'
    `error:` / `note:` lines quoted in code blocks: against the flags of all
    the programs.

Other commands (docker, kubectl, nvidia-smi, pip) are not ours and are skipped.
Each program's flags come from one `python -m programs.<name> --helpfull`
(PROGRAMS below).
"""

import os
import re
import subprocess
import sys
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

from tests.conftest import REPO

DEPLOY = os.path.join(REPO, 'deploy')
DOC = os.path.join(REPO, 'docs', 'DEPLOY.md')
DOCKERFILE = os.path.join(DEPLOY, 'Dockerfile')
COMPOSE = os.path.join(DEPLOY, 'docker-compose.yml')
KUBERNETES = os.path.join(DEPLOY, 'kubernetes.yaml')

PROGRAM = re.compile(r'programs\.(\w+)')
FLAG = re.compile(r'(?<![\w-])--([A-Za-z_]\w*)')
HELP_FLAG = re.compile(r'^\s+--(\[no\])?(\w+):', re.MULTILINE)
# The programs that deploy/ and DEPLOY.md run, each run once with --helpfull
# (under Bazel, the data of this test). A program missing here is reported.
PROGRAMS = ('programs.compare', 'programs.train', 'programs.worker')

# (where, program or None for "any program", flag name)
Use = Tuple[str, Optional[str], str]


def _read(path: str) -> str:
  with open(path) as f:
    return f.read()


def _yaml_files() -> List[str]:
  return sorted(os.path.join(DEPLOY, n) for n in os.listdir(DEPLOY)
                if n.endswith(('.yml', '.yaml')))


# ----------------------------------------------------------------------------
# Finding flag uses.


def _after_programs(text: str, where: str) -> List[Use]:
  """Flags after each `programs.<name>` in one command, up to the next program."""
  uses = []
  matches = list(PROGRAM.finditer(text))
  for m, nxt in zip(matches, matches[1:] + [None]):
    tail = text[m.end():nxt.start() if nxt else len(text)]
    uses += [(where, m.group(1), f) for f in FLAG.findall(tail)]
  return uses


def _join_continuations(lines: Iterable[str]) -> List[str]:
  out, pending = [], ''
  for line in lines:
    if line.rstrip().endswith('\\'):
      pending += line.rstrip()[:-1] + ' '
    else:
      out.append(pending + line)
      pending = ''
  return out + ([pending] if pending else [])


def markdown_uses(text: str, where: str) -> List[Use]:
  uses = []
  parts = re.split(r'^\s*```.*$', text, flags=re.MULTILINE)
  for i, part in enumerate(parts):
    if i % 2:   # inside a fenced code block
      for line in _join_continuations(part.splitlines()):
        if PROGRAM.search(line):
          uses += _after_programs(line, where)
        elif re.match(r'\s*(error|note):', line):   # our programs' own messages
          uses += [(where, None, f) for f in FLAG.findall(line)]
    else:
      for span in re.findall(r'`([^`]+)`', part):
        if PROGRAM.search(span):
          uses += _after_programs(span, where)
        elif span.lstrip().startswith('--'):
          uses += [(where, None, f) for f in FLAG.findall(span)]
  return uses


def _split_comment(line: str) -> Tuple[str, str]:
  """(code, comment) of a YAML/Dockerfile line; a '#' inside quotes is code."""
  quote = None
  for i, ch in enumerate(line):
    if quote:
      quote = None if ch == quote else quote
    elif ch in '"\'':
      quote = ch
    elif ch == '#' and (i == 0 or line[i - 1].isspace()):
      return line[:i], line[i + 1:]
  return line, ''


def yaml_blocks(text: str) -> List[List[str]]:
  """Kubernetes documents, or compose's services and other top-level keys; no comments."""
  documents = re.search(r'^apiVersion:', text, re.MULTILINE) is not None
  blocks: List[List[str]] = [[]]
  top = None
  for line in text.splitlines():
    code, _ = _split_comment(line)
    if not code.strip():
      continue
    if code.strip() == '---':
      blocks.append([])
      continue
    key = re.match(r'^( *)([\w.-]+):', code)
    if not documents and key and len(key.group(1)) == 0:
      top = key.group(2)
      blocks.append([])
    elif not documents and key and len(key.group(1)) == 2 and top == 'services':
      blocks.append([])
    blocks[-1].append(code)
  return [b for b in blocks if b]


def config_file_uses(text: str, where: str) -> List[Use]:
  """Flags in a YAML file or Dockerfile: per block, and after programs in comments."""
  uses = []
  for line in text.splitlines():
    _, comment = _split_comment(line)
    uses += _after_programs(comment, f'{where} (comment)')
  if where.endswith('Dockerfile'):
    code = [_split_comment(l)[0] for l in _join_continuations(text.splitlines())]
    blocks = [[l for l in code if re.match(r'\s*(ENTRYPOINT|CMD)\b', l)]]
  else:
    blocks = yaml_blocks(text)
  for block in blocks:
    body = '\n'.join(block)
    flags = FLAG.findall(body)
    programs = sorted(set(PROGRAM.findall(body)))
    name = block[0].strip() if block else ''
    # No program: reported as unattributable; several: any of them.
    program = '?' if not programs else programs[0] if len(programs) == 1 else None
    uses += [(f'{where} [{name}]', program, f) for f in flags]
  return uses


def all_uses() -> List[Use]:
  uses = markdown_uses(_read(DOC), 'docs/DEPLOY.md')
  for path in [DOCKERFILE] + _yaml_files():
    uses += config_file_uses(_read(path), os.path.relpath(path, REPO))
  return uses


# ----------------------------------------------------------------------------
# The programs' flags.


@pytest.fixture(scope='module')
def program_flags() -> Dict[str, Set[str]]:
  names = [p.split('.', 1)[1] for p in PROGRAMS]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  runs = {n: subprocess.Popen([sys.executable, '-m', f'programs.{n}', '--helpfull'], cwd=REPO,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for n in names}
  flags = {}
  for name, run in runs.items():
    out, err = run.communicate(timeout=300)
    found = {m.group(2) for m in HELP_FLAG.finditer(out)}
    bools = {m.group(2) for m in HELP_FLAG.finditer(out) if m.group(1)}
    assert 'helpfull' in found, f'programs.{name} --helpfull failed:\n{err[-2000:]}'
    flags[name] = found | {f'no{b}' for b in bools}
  return flags


def check(uses: Iterable[Use], program_flags: Dict[str, Set[str]]) -> List[str]:
  everything = set().union(*program_flags.values())
  problems = []
  for where, program, flag in uses:
    if program == '?':
      problems.append(f'{where}: --{flag} is not attributable to a program (name programs.<x>)')
    elif program is None:
      if flag not in everything:
        problems.append(f'{where}: --{flag} is not a flag of any program '
                        f'({", ".join(sorted(program_flags))})')
    elif program not in program_flags:
      problems.append(f'{where}: programs.{program} is not in PROGRAMS of {__name__}')
    elif flag not in program_flags[program]:
      problems.append(f'{where}: --{flag} is not a flag of programs.{program}')
  return problems


# ----------------------------------------------------------------------------
# Tests.


@pytest.mark.slow
def test_every_flag_in_deploy_files_and_docs_exists(program_flags):
  uses = all_uses()
  problems = check(uses, program_flags)
  assert not problems, '\n'.join(problems)
  # Not vacuous: the main flags of a pool deployment were all seen and checked.
  seen = {(p, f) for _, p, f in uses}
  for program, flag in [('train', 'executor'), ('train', 'workers'), ('train', 'config'),
                        ('train', 'local_workers'), ('train', 'client_devices'),
                        ('worker', 'port'), ('worker', 'log_dir')]:
    assert (program, flag) in seen, f'--{flag} of programs.{program} not found in the deploy docs'
  for path in [DOCKERFILE, COMPOSE, KUBERNETES]:
    rel = os.path.relpath(path, REPO)
    assert any(w.startswith(rel) and p not in (None, '?') for w, p, _ in uses), rel


@pytest.mark.slow
def test_the_checker_catches_a_wrong_flag(program_flags):
  doc = ('Run `python -m programs.train --executor=workers --worker=a:1`, or `--client_device=gpu`.\n'
         '```\npython -m programs.worker --port=8000 --workers=a:1\ndocker run --gpus all x\n```\n')
  problems = check(markdown_uses(doc, 'doc'), program_flags)
  assert len(problems) == 3, problems
  assert problems[0] == 'doc: --worker is not a flag of programs.train'
  assert problems[1].startswith('doc: --client_device is not a flag of any program (')
  assert problems[2] == 'doc: --workers is not a flag of programs.worker'
  compose = ('services:\n  trainer:\n    entrypoint: ["python", "-m", "programs.train"]\n'
             '    command:\n      - --rounds=3\n      - --round=3\n  other:\n    command: ["--x=1"]\n')
  problems = check(config_file_uses(compose, 'c.yml'), program_flags)
  assert problems == ['c.yml [trainer:]: --round is not a flag of programs.train',
                      'c.yml [other:]: --x is not attributable to a program (name programs.<x>)']


def _flag_value(text: str, flag: str) -> str:
  values = re.findall(rf'--{flag}=([^\s"\',\]]+(?:,[^\s"\',\]]+)*)', text)
  assert values, f'--{flag} not found'
  return values[0]


def test_dockerfile():
  text = _read(DOCKERFILE)
  code = '\n'.join(_split_comment(l)[0] for l in text.splitlines())
  assert re.search(r'^FROM python:3\.11-slim\b', code, re.MULTILINE)
  assert re.search(r'^COPY requirements\.txt ', code, re.MULTILINE)
  assert re.search(r'pip install --no-deps -r requirements\.txt', code)
  assert re.search(r'^ENTRYPOINT \["python", "-m", "programs\.worker"\]', code, re.MULTILINE)
  port = _flag_value(code, 'port')
  assert re.search(rf'^EXPOSE {port}\b', code, re.MULTILINE)
  # Every COPY source exists, and the build context keeps them (Dockerfile.dockerignore).
  sources = [s for line in re.findall(r'^COPY (.+)$', code, re.MULTILINE)
             for s in line.split()[:-1] if not s.startswith('--')]
  assert {'requirements.txt', 'tff_meta/', 'programs/'} <= set(sources)
  for source in sources:
    assert os.path.exists(os.path.join(REPO, source)), source
  ignore = _read(DOCKERFILE + '.dockerignore').splitlines()
  for source in sources:
    assert f'!{source}' in ignore, f'{source} is excluded from the build context'


def test_compose_trainer_uses_the_worker_services():
  text = _read(COMPOSE)
  code = '\n'.join(_split_comment(l)[0] for l in text.splitlines())
  services_text = code.split('\nservices:\n', 1)[1]
  services = re.findall(r'^  ([\w-]+):\s*$', services_text, re.MULTILINE)
  assert 'trainer' in services
  blocks = {re.match(r'\s*([\w.-]+):', b[0]).group(1): '\n'.join(b) for b in yaml_blocks(code)}
  trainer = blocks['trainer']
  assert 'programs.train' in trainer and '--executor=workers' in trainer
  worker_port = _flag_value(blocks['x-worker'], 'port')
  assert 'programs.worker' in blocks['x-worker']
  addresses = _flag_value(trainer, 'workers').split(',')
  assert len(addresses) == 2
  for address in addresses:
    host, port = address.rsplit(':', 1)
    assert host in services and host != 'trainer', address
    assert '<<: *worker' in blocks[host], f'{host} is not a worker service'
    assert port == worker_port
    assert re.search(rf'^      {host}:\n        condition: service_healthy', trainer, re.MULTILINE)


def _k8s_documents():
  docs = []
  for doc in re.split(r'^---\s*$', _read(KUBERNETES), flags=re.MULTILINE):
    code = '\n'.join(_split_comment(l)[0] for l in doc.splitlines())
    kind = re.search(r'^kind: (\w+)', code, re.MULTILINE)
    name = re.search(r'^metadata:\n(?:  .*\n)*?  name: ([\w.-]+)', code, re.MULTILINE)
    if kind:
      docs.append((kind.group(1), name.group(1) if name else None, code))
  return docs


def test_kubernetes_job_lists_every_worker_pod():
  docs = _k8s_documents()
  kinds = [k for k, _, _ in docs]
  assert 'Job' in kinds and 'Service' in kinds
  assert 'StatefulSet' in kinds or 'Deployment' in kinds
  workers = next(d for d in docs if d[0] in ('StatefulSet', 'Deployment') and 'programs.worker' in d[2])
  service = next(d for d in docs if d[0] == 'Service')
  job = next(d for d in docs if d[0] == 'Job')
  assert re.search(r'^  clusterIP: None', service[2], re.MULTILINE), 'the Service must be headless'
  port = _flag_value(workers[2], 'port')
  assert re.search(rf'containerPort: {port}\b', workers[2])
  assert re.search(rf'^    - .*\n      port: {port}\b', service[2], re.MULTILINE)
  assert 'programs.train' in job[2] and '--executor=workers' in job[2]
  addresses = _flag_value(job[2], 'workers').split(',')
  if workers[0] == 'StatefulSet':   # stable names: <statefulset>-<i>.<headless service>
    replicas = int(re.search(r'^  replicas: (\d+)', workers[2], re.MULTILINE).group(1))
    service_name = re.search(r'^  serviceName: ([\w-]+)', workers[2], re.MULTILINE).group(1)
    assert service_name == service[1]
    assert addresses == [f'{workers[1]}-{i}.{service_name}:{port}' for i in range(replicas)]
  # The trainer's outputs (checkpoints) must outlive a rerun: on a volume.
  output_dir = _flag_value(job[2], 'output_dir')
  mounts = re.findall(r'mountPath: (\S+)', job[2])
  assert any(output_dir.startswith(m.rstrip('/') + '/') for m in mounts), (output_dir, mounts)


def _mounted(block: str, path: str) -> bool:
  """Whether a compose service mounts a host file at `path` (read-only)."""
  return re.search(rf'^\s*- \S+:{re.escape(path)}:ro$', block, re.MULTILINE) is not None


def _make_certs_hosts(text: str) -> List[str]:
  return _flag_value(text, 'hosts').split(',')


def test_compose_pool_uses_mutual_tls_on_an_internal_network():
  code = '\n'.join(_split_comment(l)[0] for l in _read(COMPOSE).splitlines())
  blocks = {re.match(r'\s*([\w.-]+):', b[0]).group(1): '\n'.join(b) for b in yaml_blocks(code)}
  worker, trainer = blocks['x-worker'], blocks['trainer']
  for flag, name in (('tls_ca', 'ca.crt'), ('tls_cert', 'worker.crt'), ('tls_key', 'worker.key')):
    assert _mounted(worker, _flag_value(worker, flag)), flag
    assert _flag_value(worker, flag).endswith('/' + name)
  for flag, name in (('workers_tls_ca', 'ca.crt'), ('workers_tls_cert', 'trainer.crt'),
                     ('workers_tls_key', 'trainer.key')):
    assert _mounted(trainer, _flag_value(trainer, flag)), flag
    assert _flag_value(trainer, flag).endswith('/' + name)
  assert 'ca.key' not in code   # the CA's key stays on the host
  assert re.search(r'^networks:\n  pool:\n    internal: true', code, re.MULTILINE)
  assert re.search(r'^  networks: \[pool\]', blocks['x-image'], re.MULTILINE)
  assert '<<: *image' in worker and '<<: *image' in trainer
  # The documented certificates name every worker the trainer lists.
  hosts = [a.rsplit(':', 1)[0] for a in _flag_value(trainer, 'workers').split(',')]
  doc = _read(DOC).split('\n## Docker', 1)[1].split('\n## ', 1)[0]
  assert _make_certs_hosts(doc) == hosts


def test_kubernetes_pool_uses_tls_secrets_and_a_network_policy():
  docs = _k8s_documents()
  workers = next(d for d in docs if d[0] == 'StatefulSet')[2]
  job = next(d for d in docs if d[0] == 'Job')[2]
  policy = next(d for d in docs if d[0] == 'NetworkPolicy')[2]
  port = _flag_value(workers, 'port')
  for text, prefix, secret in ((workers, 'tls_', 'tff-worker-tls'),
                               (job, 'workers_tls_', 'tff-trainer-tls')):
    assert re.search(rf'secretName: {secret}\n\s+defaultMode: 0400', text), secret
    mount = re.search(r'- name: tls\n\s+mountPath: (\S+)\n\s+readOnly: true', text).group(1)
    for name in ('ca', 'cert', 'key'):
      assert os.path.dirname(_flag_value(text, prefix + name)) == mount
  # Only the trainer's pods, only the TLS port.
  assert re.search(r'podSelector:\n\s+matchLabels:\n\s+app: tff-worker\n', policy)
  assert re.search(r'policyTypes: \["Ingress"\]', policy)
  assert re.search(r'- from:\n\s+- podSelector:\n\s+matchLabels:\n\s+app: tff-meta-train\n'
                   rf'\s+ports:\n\s+- protocol: TCP\n\s+port: {port}\s*$', policy)
  assert re.search(r'template:\n\s+metadata:\n\s+labels:\n\s+app: tff-meta-train', job)
  assert re.search(r'template:\n\s+metadata:\n\s+labels:\n\s+app: tff-worker', workers)
  # The documented certificates name every worker pod the trainer lists, and no Secret holds ca.key.
  hosts = [a.rsplit(':', 1)[0] for a in _flag_value(job, 'workers').split(',')]
  doc = _read(DOC).split('\n## Kubernetes', 1)[1].split('\n## ', 1)[0]
  assert _make_certs_hosts(doc) == hosts
  assert _make_certs_hosts(_read(KUBERNETES)) == hosts
  secrets = re.findall(r'kubectl create secret generic (\S+) (.*)', doc)
  assert sorted(name for name, _ in secrets) == ['tff-trainer-tls', 'tff-worker-tls']
  assert all('ca.key' not in files for _, files in secrets)
