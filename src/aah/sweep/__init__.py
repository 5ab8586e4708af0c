"""Suites: a grid of regimes x seeds trained cell by cell, resumable, summarised as a CSV."""

from aah.sweep.config import Cell, SweepConfig
from aah.sweep.results import COLUMNS, read_csv
from aah.sweep.runner import SweepOutcome, run_sweep

__all__ = ["COLUMNS", "Cell", "SweepConfig", "SweepOutcome", "read_csv", "run_sweep"]
