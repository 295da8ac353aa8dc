"""Experiment configs and the tff.program training loop."""
