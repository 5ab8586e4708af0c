"""Peer comparisons and one-off studies, each run from the repository root as
`python -m experiments.scripts.NAME --help`."""
