"""The project's own studies of per-head windows: not part of the installed `aah` package.

Run from the repository root (`python -m experiments.pretrained ...`); they import `aah` like
any user's script. experiments/README.md lists the commands; experiments/tests/ tests them.
"""
