"""tff_meta: federated meta-learning and personalized FL on TensorFlow Federated."""

__version__ = '0.1.0'
