"""Tests for tff_meta.fewround.baselines: the methods' hparams."""

from tff_meta.fewround import baselines, config


def test_personalization_never_uploads_global_prototypes_it_does_not_read():
  cfg = config.load(None, {'train_prototypes': 'recomputed', 'gamma': 0.5, 'rounds': 3})
  hp = baselines.personalization_hparams(cfg)
  assert (hp.train_prototypes, hp.rounds, hp.gamma, hp.local_adaptation) == (
      'previous', 0, 0.0, True)
  # The FRL methods keep the config's rule.
  assert cfg.hparams().train_prototypes == 'recomputed'
