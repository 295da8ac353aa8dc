"""A stand-in Python for the tests of research/queues/*.sh, and the reading of its commands.

The stand-in prints each command (as PY=echo would) and appends it to $CALLS, and leaves what the
program would: the run folder of --output_dir and the scores file <stem>.json of --output; it
exits with $FAIL (0 unless set).
"""

import os
import re
import shlex
import subprocess

from tests.conftest import REPO

FAKE_PY = ('#!/usr/bin/env bash\n'
           'echo "$@"; echo "$@" >> "$CALLS"\n'
           'for a in "$@"; do case $a in --output_dir=*) mkdir -p "${a#*=}" ;;\n'
           '  --output=*) touch "${a#*=}.json" ;; esac; done\n'
           'exit ${FAIL:-0}\n')


def parse_flags(args):
  """--name=value arguments -> {name: value} (a bare --name -> '')."""
  return dict(re.match(r'--([^=]+)=?(.*)', a).groups() for a in args if a.startswith('--'))


def run_queue(script, tmp_path, *args, **env):
  """`bash <script> <args>` with the stand-in as PY and the lanes started together
  (STAGGER=0): OUT is <tmp_path>/out, DATA tmp_path, the commands go to <tmp_path>/calls;
  `env` adds or overrides variables."""
  fake = tmp_path / 'py'
  fake.write_text(FAKE_PY)
  fake.chmod(0o755)
  env = {**os.environ, 'PY': str(fake), 'NICE': '0', 'STAGGER': '0', 'OUT': str(tmp_path / 'out'),
         'DATA': str(tmp_path), 'CALLS': str(tmp_path / 'calls'), **env}
  return subprocess.run(['bash', os.path.join(REPO, script), *args], capture_output=True,
                        text=True, timeout=120, cwd=tmp_path, env=env, check=False)


def recorded_calls(tmp_path):
  """The stand-in's commands so far, as argument lists."""
  path = tmp_path / 'calls'
  return [shlex.split(line) for line in path.read_text().splitlines()] if path.exists() else []
