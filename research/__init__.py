"""Research diagnostics: not installed; see research/README.md."""
