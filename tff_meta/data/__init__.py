"""Federated data sources, selectable by name in `DATASETS`, and the protocol."""

from tff_meta.data.registry import DATASETS, load_dataset
from tff_meta.data.types import ClientArrays, DataError, FederatedDataset

__all__ = ['DATASETS', 'load_dataset', 'ClientArrays', 'DataError', 'FederatedDataset']
