"""research/rename_config_keys.py: old keys of a run folder renamed once, nothing else touched."""

import json
import os

from research import rename_config_keys
from tff_meta.fewround import config as fewround_config
from tff_meta.recommendation import config as recommend_config


def test_old_keys_are_renamed_once_and_the_folder_reads_as_today(tmp_path):
  few = tmp_path / 'few'
  few.mkdir()
  old_toml = 'name = "x"\nmeta_lr = 0.003\nmeta_lr_decay_episode = 20\n\n[data]\nmeta_lr = 1\n'
  (few / 'config.toml').write_text(old_toml)
  results = json.dumps({'config': old_toml, 'results': [{'method': 'm'}]}, indent=1)
  (few / 'results.json').write_text(results)
  rec = tmp_path / 'rec' / 'cell'
  rec.mkdir(parents=True)
  (rec / 'config.toml').write_text('meta_optimizer = "sgd"\nmeta_lr = 0.01\nepisodes = 3\n')
  (rec / 'other.toml').write_text('meta_lr = 1\n')

  changed = rename_config_keys.rewrite(str(tmp_path))
  assert sorted(changed) == sorted(map(str, [few / 'config.toml', few / 'results.json',
                                             rec / 'config.toml']))
  new_toml = 'name = "x"\nserver_lr = 0.003\nserver_lr_decay_episode = 20\n\n[data]\nmeta_lr = 1\n'
  assert (few / 'config.toml').read_text() == new_toml   # only top-level keys: [data] kept
  assert json.loads((few / 'results.json').read_text()) == {'config': new_toml,
                                                            'results': [{'method': 'm'}]}
  assert (few / 'results.json').read_text() == results.replace(json.dumps(old_toml),
                                                                json.dumps(new_toml))
  assert (rec / 'other.toml').read_text() == 'meta_lr = 1\n'
  cfg = recommend_config.load(str(rec / 'config.toml'))
  assert (cfg.server_optimizer, cfg.server_lr, cfg.episodes) == ('sgd', 0.01, 3)
  assert fewround_config.load(str(few / 'config.toml')).hparams().server_lr == 0.003
  assert rename_config_keys.rewrite(str(tmp_path)) == []   # once


def test_the_committed_run_folders_have_no_old_keys():
  docs_runs = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, 'docs', 'runs')
  for root, _, names in os.walk(docs_runs):
    for name in ('config.toml', 'results.json'):
      if name in names:
        with open(os.path.join(root, name), encoding='utf-8') as f:
          text = f.read()
        rewrite = (rename_config_keys.renamed_toml if name.endswith('.toml')
                   else rename_config_keys.renamed_results)
        assert rewrite(text) == text, os.path.join(root, name)
  assert set(rename_config_keys.OLD_KEYS) == {'meta_lr', 'meta_lr_decay_episode', 'meta_optimizer'}
