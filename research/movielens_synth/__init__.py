"""See research/README.md."""
