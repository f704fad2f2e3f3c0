"""turnkeeper's benchmark suite: `python -m bench` writes docs/benchmarks.md."""
