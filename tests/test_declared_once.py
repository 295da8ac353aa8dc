"""Each setting is declared once (issue 67): a name that two classes declare with
`field(default, help, check)`, or as a plain default of a settings dataclass, means
two different things, and DISTINCT says what; a setting that means the same thing in several
configs is declared once and used through `fields.declared(source, name, default)`. No TF."""
import ast
import collections
import dataclasses
import os
from pathlib import Path

import pytest

REPO = Path(os.path.realpath(__file__)).parent.parent
PACKAGE = REPO / 'tff_meta'

# Names declared more than once because they mean different things in different tasks.
DISTINCT = {
    'rounds': 'classification: training rounds; few-round learning: R, rounds per episode',
    'episodes': 'few-round: meta-training episodes T of R + 1 rounds over K clients; '
                'recommendation: episodes of one user (or a meta-batch of users)',
    'dataset': 'each task names a source of its own registry (clients, class splits)',
    'model': 'classification: a MODELS builder; recommendation: a rating model',
    'methods': 'few-round: baselines.METHODS; recommendation: its task\'s method table',
    'batch_size': 'algorithms: FedAvg\'s minibatch (>= 1); recommendation: pre-training and '
                  'SELF minibatches, <= 0 = all of a user\'s data',
    'support_fraction': 'classification: every client\'s split; recommendation: test users only '
                        '(training users have train_support_fraction)',
}


def _is_field_call(node) -> bool:
  """`field(...)`, `fields.field(...)` or `hparams.field(...)`; not `dataclasses.field`."""
  if not isinstance(node, ast.Call):
    return False
  f = node.func
  return (isinstance(f, ast.Name) and f.id == 'field') or (
      isinstance(f, ast.Attribute) and f.attr == 'field' and
      getattr(f.value, 'id', '') in ('fields', 'hparams'))


def _is_declared_call(node) -> bool:
  return isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'declared'


def _is_settings(cls: ast.ClassDef) -> bool:
  """A dataclass of settings (its name ends in Config or Hparams): a plain default there is a
  declaration outside the field system. Records (stats, schedules, entries) are not settings."""
  return (cls.name.endswith(('Config', 'Hparams')) and
          any('dataclass' in ast.unparse(d) for d in cls.decorator_list))


def declarations():
  """name -> ['path:Class', ...] of every declaration in the package."""
  by_field, plain = collections.defaultdict(list), collections.defaultdict(list)
  for path in sorted(PACKAGE.rglob('*.py')):
    for cls in ast.walk(ast.parse(path.read_text())):
      if not isinstance(cls, ast.ClassDef):
        continue
      for st in cls.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and
                st.value is not None):
          continue
        where = f'{path.relative_to(REPO)}:{cls.name}'
        if _is_field_call(st.value):
          by_field[st.target.id].append(where)
        elif _is_settings(cls) and not _is_declared_call(st.value) and not isinstance(
            st.value, ast.Call):
          plain[st.target.id].append(where)
  return {name: where + plain.get(name, []) for name, where in by_field.items()}


def test_a_setting_is_declared_once():
  twice = {n: w for n, w in declarations().items() if len(w) > 1 and n not in DISTINCT}
  if twice:
    pytest.fail('\n'.join(f'{n} is declared in {", ".join(w)}: declare it once and use '
                          'fields.declared(source, name, default) elsewhere, or add it to '
                          'DISTINCT with what each means' for n, w in sorted(twice.items())),
                pytrace=False)


def test_distinct_names_are_still_declared_twice():
  found = declarations()
  assert not [n for n in DISTINCT if len(found.get(n, [])) < 2]


def test_the_check_sees_a_second_declaration(tmp_path, monkeypatch):
  (tmp_path / 'tff_meta').mkdir()
  (tmp_path / 'tff_meta' / 'a.py').write_text(
      '@dataclasses.dataclass\nclass A:\n  inner_lr: float = field(0.1, "alpha")\n')
  (tmp_path / 'tff_meta' / 'b.py').write_text(
      '@dataclasses.dataclass\nclass BHparams:\n  inner_lr: float = 0.2\n'
      '  server_lr: float = declared(A, "server_lr")\n')
  monkeypatch.setitem(globals(), 'PACKAGE', tmp_path / 'tff_meta')
  monkeypatch.setitem(globals(), 'REPO', tmp_path)
  assert declarations() == {'inner_lr': ['tff_meta/a.py:A', 'tff_meta/b.py:BHparams']}


def test_a_declared_field_keeps_its_source_help_and_check():
  from tff_meta.algorithms import hparams  # pylint: disable=g-import-not-at-top
  from tff_meta.core import fields  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround.config import FewRoundConfig  # pylint: disable=g-import-not-at-top
  from tff_meta.fewround.few_round_process import FewRoundHparams  # pylint: disable=g-import-not-at-top
  from tff_meta.recommendation.config import RecommendConfig  # pylint: disable=g-import-not-at-top
  source = {f.name: f for f in dataclasses.fields(hparams.InnerRate)}['inner_lr']
  for cls, default in ((FewRoundConfig, 0.1), (FewRoundHparams, 0.1), (RecommendConfig, 0.01)):
    f = {f.name: f for f in dataclasses.fields(cls)}['inner_lr']
    assert f.default == default
    assert fields.help_of(f) == fields.help_of(source)
    assert fields.check_of(f) is fields.check_of(source)
  # few-round's process hparams have the config's defaults
  config, process = FewRoundConfig(), FewRoundHparams()
  assert config.hparams() == process
  with pytest.raises(TypeError, match='declares no field'):
    fields.declared(hparams.InnerRate, 'inner_rate')
