"""The privacy config keys and flags: checks, aggregator choice, budget (issue #18)."""

import dataclasses

import pytest
import tensorflow_federated as tff

from tff_meta.core import config_file
from tff_meta.algorithms import Hparams, aggregation
from tff_meta.classification import accounting, privacy
from tff_meta.classification import config as config_lib

BASE = config_lib.ExperimentConfig(clients_per_round=5)


def _cfg(**kw):
  hp = kw.pop('hparams', {})
  return dataclasses.replace(BASE, hparams=Hparams(**hp), **kw)


@pytest.mark.parametrize('kw, key', [
    (dict(dp_clip='abc'), 'dp_clip'),
    (dict(dp_clip='-1'), 'dp_clip'),
    (dict(dp_noise_multiplier=1.0), 'dp_clip'),            # noise without a clip
    (dict(dp_noise_multiplier=-0.5, dp_clip='1'), 'dp_noise_multiplier'),
    (dict(dp_clip='1', dp_delta=1.5), 'dp_delta'),
    (dict(dp_clip='adaptive', dp_clip_quantile=1.0), 'dp_clip_quantile'),
    (dict(dp_clip='adaptive', dp_noise_multiplier=1.0), 'clients_per_round'),
    (dict(dp_clip='1', hparams=dict(weighting='num_examples')), 'weighting'),
])
def test_bad_values_are_config_errors_naming_the_key(kw, key):
  with pytest.raises(config_lib.ConfigError, match=key):
    _cfg(**kw).validate()


def test_good_values_pass():
  _cfg(dp_clip='0.5', dp_noise_multiplier=1.0, secure_aggregation=True).validate()
  _cfg(dp_clip='adaptive', dp_noise_multiplier=0.4, clients_per_round=5).validate()
  _cfg(secure_aggregation=True, hparams=dict(weighting='num_examples')).validate()


def test_flags_reach_the_keys(tmp_path):
  path = tmp_path / 'c.toml'
  path.write_text('dp_clip = 0.5\n')
  cfg = config_lib.load(str(path), {'dp_noise_multiplier': '1.0', 'secure_aggregation': 'true',
                                    'dp_delta': '1e-6'})
  assert (cfg.dp_clip, cfg.dp_noise_multiplier, cfg.secure_aggregation, cfg.dp_delta) == \
      ('0.5', 1.0, True, 1e-6)
  for key in ('dp_noise_multiplier', 'dp_clip', 'dp_clip_quantile', 'dp_delta',
              'secure_aggregation'):
    assert key in config_lib.TOP_LEVEL and config_lib.flag_help(key)
  assert 'dp_clip = "0.5"' in config_file.to_toml(cfg)


def test_aggregator_choice():
  assert privacy.model_aggregator(_cfg(), 5) is None
  dp = privacy.model_aggregator(_cfg(dp_clip='1', dp_noise_multiplier=1.0), 5)
  assert aggregation.is_private(dp) and not aggregation.is_weighted(dp)
  adaptive = privacy.model_aggregator(_cfg(dp_clip='adaptive', dp_noise_multiplier=0.3), 5)
  assert aggregation.is_private(adaptive)
  secure = privacy.model_aggregator(_cfg(secure_aggregation=True), 5)
  assert aggregation.is_weighted(secure) and not aggregation.is_private(secure)
  assert isinstance(secure, tff.aggregators.WeightedAggregationFactory)


def test_budget_uses_the_population_and_the_default_delta():
  assert privacy.budget(_cfg(secure_aggregation=True), 40) is None
  with pytest.raises(ValueError, match='clients_per_round = 50 of 40'):   # refused, not capped
    privacy.budget(_cfg(dp_clip='1', dp_noise_multiplier=1.0, clients_per_round=50), 40)
  budget = privacy.budget(_cfg(dp_clip='1', dp_noise_multiplier=1.0, clients_per_round=40), 40)
  assert budget.clients_per_round == 40 and budget.delta == accounting.default_delta(40)
  assert budget.epsilon(3) == accounting.epsilon(1.0, population=40, clients_per_round=40,
                                                 rounds=3, delta=budget.delta)
  fixed = privacy.budget(_cfg(dp_clip='1', dp_noise_multiplier=1.0, dp_delta=1e-4), 40)
  assert fixed.delta == 1e-4
