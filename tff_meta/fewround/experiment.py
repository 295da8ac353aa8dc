"""One few-round experiment: prepare and test every configured method, write the results.

Used by `programs/train.py` (one config) and `programs/sweep.py`
(a grid of configs). Outputs in the run folder: results.json (the config as
TOML and one row per method, with every test episode's accuracy per R, so
two runs on the same seeded episodes can be compared episode by episode),
results.md (the table), written after every method so a stopped run keeps
what it finished. A rerun of the same configuration into the same folder
takes a method's row from results.json instead of testing it again
(`finished_rows`), and a method whose test was stopped part way resumes
after its last saved test episode (<out>/test_progress/<method>.json,
`deploy.test_episodes`; removed once the method's row is written).
"""

import contextlib
import json
import os
import time
import tomllib

import numpy as np
import tensorflow_federated as tff

from tff_meta.core import resume
from tff_meta.core import config_file, provenance
from tff_meta.core.config_file import ConfigError
from tff_meta.core.tables import markdown_table
from tff_meta.fewround import baselines, deploy, tasks
from tff_meta.fewround.config import resume_rules, toml_defaults
from tff_meta.core import files
from tff_meta.core.run_folder import CONFIG_FILE, RESULTS_FILE, RESULTS_TABLE_FILE


def table(cfg, rows) -> str:
  """Markdown: a row per method, its accuracy after each R in `test_rounds`, its preparing rounds and seconds."""
  return markdown_table(
      ['method', *(f'R = {r}' for r in cfg.test_rounds), 'preparing rounds', 'seconds'],
      [[row['method'], *(row['accuracy'][str(r)]['text'] for r in cfg.test_rounds),
        row['info'].get('communication_rounds', 0), f"{row['seconds']:.0f}"] for row in rows])


def prepare_output(cfg, out: str) -> None:
  """Refuses to resume a run of other settings (`config.resume_rules`), then saves config.toml.

  Each preparing stage keeps its checkpoints in <out>/<stage>/checkpoints
  (`baselines.Context.run_dir`); the config they were written with is
  <out>/config.toml. One with a key's old name (e.g. meta_lr) is refused with
  its new name.
  """
  saved = config_file.to_toml(cfg)
  resume.claim_for_resume(out, tomllib.loads(saved), **resume_rules())
  files.write_text(os.path.join(out, CONFIG_FILE), saved)
  provenance.record(out)   # each stage resumes on its own: the start is left blank


def load_data(cfg):
  data = tasks.load_class_split(cfg.dataset, cfg.class_split, cfg.seed, **cfg.data)
  print(f'{data.description}; classes per part: '
        f'{ {k: len(v) for k, v in data.classes.items()} }', flush=True)
  check_request(cfg, data)
  return data


def check_request(cfg, data) -> None:
  """Refuses, before anything is written, episodes the class split cannot give (a ConfigError
  naming the numbers): more ways than a part's classes, or more examples per class than a
  class has. Parts: meta-train, the scored part, and validation when checkpoints are chosen
  on it (select_every)."""
  used = {'train', cfg.eval_part} | ({'validation'} if cfg.select_every else set())
  counts = np.bincount(data.y, minlength=1 + max(int(np.max(c, initial=0))
                                                  for c in data.classes.values()))
  for part in (p for p in tasks.PARTS if p in used):
    classes = data.part(part)
    if cfg.ways > len(classes):
      raise ConfigError(
          f'n_way = {cfg.ways} needs {cfg.ways} classes per episode, but the {part} part of '
          f'{data.name}\'s class split (class_split = {list(cfg.class_split)}) has '
          f'{len(classes)}; set n_way to at most {len(classes)}, or give that part more classes.')
    small = [int(c) for c in classes if counts[c] < cfg.examples_per_class]
    if small:
      raise ConfigError(
          f'examples_per_class = {cfg.examples_per_class}, but {len(small)} of the '
          f'{len(classes)} {part} classes of {data.name} have fewer examples (class '
          f'{small[0]}: {counts[small[0]]}); set examples_per_class to at most '
          f'{min(counts[c] for c in classes)}.')


def write(cfg, out, rows) -> str:
  text = table(cfg, rows)
  files.write_json(os.path.join(out, RESULTS_FILE),
                   {'config': config_file.to_toml(cfg), 'results': rows}, indent=1)
  files.write_text(os.path.join(out, RESULTS_TABLE_FILE), text + '\n')
  return text


# Keys that may differ between the run that tested a method and a rerun that reuses its
# row: they change neither the prepared model nor its test episodes.
_ROW_KEEPING_CHANGES = ('name', 'methods', 'output_dir', 'checkpoint_every')

TEST_PROGRESS_DIR = 'test_progress'   # <out>/test_progress/<method>.json: a test phase's episodes so far


def test_fingerprint(cfg, method: str) -> str:
  """What, besides the deployed weights and the round counts, decides a method's test episodes
  and how they are played: the method and the config without the keys that change neither
  (`_ROW_KEEPING_CHANGES`) nor the number of test episodes (more of them extend a test)."""
  keep = {k: v for k, v in tomllib.loads(config_file.to_toml(cfg)).items()
          if k not in _ROW_KEEPING_CHANGES + ('test_episodes',)}
  return json.dumps({'method': method, 'config': keep}, sort_keys=True, default=str)


def finished_rows(cfg, out: str) -> dict:
  """Method -> its row in <out>/results.json, when that file was written by this very
  configuration (every key but `_ROW_KEEPING_CHANGES` equal, a key the saved config lacks
  counting as its default); {} otherwise.

  A stopped run's finished methods are not tested again on resume (300 test
  episodes take minutes); their rows are the same numbers a new test would give,
  since test episode i is drawn from (seed, TEST_STREAM, i).
  """
  path = os.path.join(out, RESULTS_FILE)
  if not os.path.exists(path):
    return {}
  try:
    with open(path, encoding='utf-8') as f:
      saved = json.load(f)
    before = tomllib.loads(saved['config'])
    rows = {row['method']: row for row in saved['results']}
  except (OSError, ValueError, KeyError, TypeError):
    return {}   # unreadable: test again (the file is rewritten atomically after each method)
  now = tomllib.loads(config_file.to_toml(cfg))
  defaults = toml_defaults()   # keys the saved config predates
  same = lambda d: {k: v for k, v in {**defaults, **d}.items() if k not in _ROW_KEEPING_CHANGES}
  return rows if same(before) == same(now) else {}


def run(cfg, data, pool, progress: bool, out: str):
  """Prepares and tests every method (results written after each); returns the rows."""
  ctx = baselines.Context(cfg, data, progress, out=out)
  done = finished_rows(cfg, out)
  rows = []
  with tff.framework.get_context_stack().install(pool.context):
    for name in cfg.methods:
      if name in done:
        row = done[name]
        print(f"{name}: tested already ({os.path.join(out, RESULTS_FILE)}): "
              + ', '.join(f"R={r} {a['text']}" for r, a in row['accuracy'].items()), flush=True)
        rows.append(row)
        write(cfg, out, rows)
        continue
      start = time.time()
      progress_file = os.path.join(out, TEST_PROGRESS_DIR, f'{name}.json')
      os.makedirs(os.path.dirname(progress_file), exist_ok=True)
      with pool.watch(f'method {name}'):
        prepared = baselines.METHODS.get(name)(ctx)
        computations = ctx.round_computations(prepared.model, prepared.hparams)
        summaries = deploy.test_episodes(
            computations, prepared.weights,
            lambda i: ctx.episode(cfg.eval_part, baselines.TEST_STREAM, i), cfg.test_episodes,
            cfg.test_rounds, progress, desc=f'test {name}', episode_fn=prepared.episode_fn,
            progress_file=progress_file, fingerprint=test_fingerprint(cfg, name))
      row = {'method': name, 'seconds': time.time() - start, 'info': prepared.info,
             'accuracy': {str(r): {'mean': s.mean, 'ci95': s.ci95, 'episodes': s.episodes,
                                   'text': str(s), 'per_episode': s.accuracies}
                          for r, s in summaries.items()}}
      print(f"{name}: " + ', '.join(f'R={r} {s}' for r, s in summaries.items()), flush=True)
      rows.append(row)
      write(cfg, out, rows)
      with contextlib.suppress(FileNotFoundError):
        os.remove(progress_file)   # the row holds every episode now
  return rows
