"""Benchmarks behind `aah bench` and `benchmarks/*.py`: a human table, then one JSON line."""
