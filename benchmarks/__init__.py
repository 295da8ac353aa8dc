"""Speed and data-loading benchmarks (not tests; see docs/RESULTS.md)."""
