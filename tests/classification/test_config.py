"""Config files and flag overrides: types, unknown names, bad values."""

import pytest

from tff_meta.core import config_file
from tff_meta.classification import config as config_lib
from tff_meta.core.registry import UnknownNameError


def _write(tmp_path, text):
  path = tmp_path / 'c.toml'
  path.write_text(text)
  return str(path)


def test_demo_config_loads_and_validates():
  cfg = config_lib.load('configs/demo/digits.toml').validate()
  assert cfg.dataset == 'digits' and cfg.hparams.inner_lr == 0.1
  assert cfg.data == {'num_clients': 100, 'labels_per_client': 2}


def test_overrides_are_typed(tmp_path):
  cfg = config_lib.load(_write(tmp_path, 'rounds = 5\n'),
                        {'rounds': '7', 'inner_lr': '0.5', 'client_split': '0.6,0.2,0.2',
                         'cache_dir': '/data'})
  assert cfg.rounds == 7 and cfg.hparams.inner_lr == 0.5
  assert cfg.client_split == (0.6, 0.2, 0.2) and cfg.data['cache_dir'] == '/data'


def test_bool_flags_read_words_not_truthiness(tmp_path):
  path = _write(tmp_path, 'resident_state = true\n')
  for text, value in (('false', False), ('False', False), ('0', False), ('no', False),
                      ('true', True), ('1', True), ('yes', True)):
    assert config_lib.load(path, {'resident_state': text}).resident_state is value, text
  with pytest.raises(config_lib.ConfigError, match='resident_state'):
    config_lib.load(path, {'resident_state': 'maybe'})


def test_round_trip_through_toml(tmp_path):
  cfg = config_lib.load('configs/demo/digits.toml')
  again = config_lib.load(_write(tmp_path, config_file.to_toml(cfg)))
  assert again == cfg


@pytest.mark.parametrize('text, match', [
    ('algoritm = "fedavg"\n', "unknown key 'algoritm'"),
    ('rounds = "many"\n', 'rounds: expected a int'),
    ('[hparams]\nalpha = 0.1\n', "unknown \\[hparams\\] key 'alpha'"),
    ('rounds = [\n', 'malformed TOML'),
])
def test_bad_files_name_the_problem(tmp_path, text, match):
  with pytest.raises(config_lib.ConfigError, match=match):
    config_lib.load(_write(tmp_path, text))


@pytest.mark.parametrize('override, error, match', [
    ({'algorithm': 'fedprox2'}, UnknownNameError, "Unknown algorithm 'fedprox2'"),
    ({'dataset': 'emnst'}, UnknownNameError, "Unknown dataset 'emnst'.*Did you mean 'emnist'"),
    ({'model': 'cnn'}, UnknownNameError, "Unknown model 'cnn'"),
    ({'support_fraction': '1.0'}, ValueError, r'support_fraction must be in \(0, 1\)'),
    ({'support_fraction': '0'}, ValueError, r'support_fraction must be in \(0, 1\)'),
    ({'server_optimizer': 'adamw'}, UnknownNameError, "Unknown optimizer 'adamw'"),
    ({'rounds': '0'}, config_lib.ConfigError, 'rounds must be >= 1'),
    ({'prox_mu': '-0.1'}, config_lib.ConfigError, r'prox_mu \(FedProx mu\) must be >= 0'),
    ({'pfedme_lambda': '0'}, config_lib.ConfigError, 'pfedme_lambda must be > 0'),
    ({'local_steps': '0'}, config_lib.ConfigError, 'local_steps must be >= 1'),
])
def test_bad_values_are_rejected(override, error, match):
  cfg = config_lib.load('configs/demo/digits.toml', override)
  with pytest.raises(error, match=match):
    cfg.validate()


def test_missing_file():
  with pytest.raises(config_lib.ConfigError, match='does not exist'):
    config_lib.load('configs/nope.toml')


def test_every_config_key_has_a_flag_help_line():
  # docs/CONFIG.md documents every key: tests/test_docs.py.
  missing = [k for k in [*config_lib.TOP_LEVEL, *config_lib.HPARAMS] if not config_lib.flag_help(k)]
  assert not missing, 'every config key needs a flag help line'


def test_method_hparams_apply_per_algorithm(tmp_path):
  cfg = config_lib.load(_write(tmp_path, '[hparams]\ninner_lr = 0.1\n'
                               '[method_hparams.fedmeta_maml]\ninner_lr = 0.05\n'))
  assert cfg.for_algorithm('fedmeta_maml', 'o').hparams.inner_lr == 0.05
  assert cfg.for_algorithm('fedmeta_fomaml', 'o').hparams.inner_lr == 0.1
  # A flag beats the per-method table.
  flagged = config_lib.apply_overrides(cfg, {'inner_lr': '0.2'})
  assert flagged.for_algorithm('fedmeta_maml', 'o').hparams.inner_lr == 0.2
  with pytest.raises(config_lib.ConfigError, match="method_hparams.fedavg] key 'alpha'"):
    config_lib.load(_write(tmp_path, '[method_hparams.fedavg]\nalpha = 1\n'))
  with pytest.raises(UnknownNameError, match="Unknown algorithm 'fedavgg'"):
    config_lib.load(_write(tmp_path, '[method_hparams.fedavgg]\nclient_lr = 1\n'))


def test_method_hparams_take_only_the_methods_own_keys(tmp_path):
  # inner_lr is a key of [hparams] (FedMeta reads it), but FedAvg does not read it.
  with pytest.raises(config_lib.ConfigError,
                     match=r"\[method_hparams.fedavg\] key 'inner_lr'; fedavg reads: \[.*'client_lr'"):
    config_lib.load(_write(tmp_path, '[method_hparams.fedavg]\ninner_lr = 0.1\n'))


def test_flag_help_comes_from_the_registries_and_dataclasses():
  from tff_meta.algorithms import ALGORITHMS  # pylint: disable=g-import-not-at-top
  assert all(name in config_lib.flag_help('algorithm') for name in ALGORITHMS.names())
  # An hparam's help is its field's text and the algorithms that read it.
  assert config_lib.flag_help('prox_mu').startswith('FedProx mu:')
  assert config_lib.flag_help('prox_mu').endswith('Read by: fedprox.')
  assert 'Read by: every algorithm.' in config_lib.flag_help('weighting')
  assert config_lib.flag_help('finetune_epochs').endswith('Read by: fedavg_meta, fedavg_meta_fedper.')
  assert config_lib.flag_help('client_lr').endswith('fedmeta_fedper_metasgd, fedper, fedprox, fedrep, '
                                                'lg_fedavg, local_only, reptile, scaffold.')


def test_apfl_alpha_range_is_checked(tmp_path):
  with pytest.raises(config_lib.ConfigError, match=r'hparams.apfl_alpha must be in \[0, 1\], got 1.5'):
    config_lib.load(_write(tmp_path, '[hparams]\napfl_alpha = 1.5\n')).validate()
