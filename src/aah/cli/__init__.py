"""The `aah` command line; `main` and its parser live in `aah.cli.entry`."""

from __future__ import annotations

from aah.cli.entry import HEAVY_COMMANDS, PROG, build_parser, main

__all__ = ["HEAVY_COMMANDS", "PROG", "build_parser", "main"]
