"""Model builders, selectable by name, and their functional (weights-in) form."""

from tff_meta.models.keras_models import MODELS
from tff_meta.models import conv4  # noqa: F401  registers 'conv4' (few-round learning)
from tff_meta.models.functional import ModelSpec, build_model_spec

__all__ = ['MODELS', 'ModelSpec', 'build_model_spec']
