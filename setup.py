"""The wheel's packages: tff_meta and programs, and the repository's configs/ shipped inside
tff_meta as tff_meta/configs (package data), so `tff-meta train --config=demo` finds them
outside the checkout (tff_meta/core/config_file.py: resolve_config). Metadata is in pyproject.toml."""

from setuptools import find_namespace_packages, find_packages, setup

CONFIGS = ['tff_meta.configs'] + [f'tff_meta.configs.{name}'
                                  for name in find_namespace_packages('configs')]

setup(packages=find_packages(include=['tff_meta', 'tff_meta.*', 'programs']) + CONFIGS,
      package_dir={'tff_meta.configs': 'configs'},
      package_data={name: ['*.toml'] for name in CONFIGS})
