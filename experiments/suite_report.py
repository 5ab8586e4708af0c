"""This project's report over its training suites: the package's suite report (`aah report`)
with the AAH-v3 paper's findings checked on each suite (`paper_claims`).

    python -m experiments.suite_report results/          # results/REPORT.md and its figures
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from aah.report.suite import build_suite_report
from experiments.paper_claims import FAMILIES, paper_section

COMMAND = "python -m experiments.suite_report"


def build(results_dir: Path, out_dir: Path | None = None) -> Path:
    """REPORT.md over every suite of `results_dir`, with the paper's findings checked."""
    return build_suite_report(
        results_dir, out_dir, families=FAMILIES, extra_sections=[paper_section], command=COMMAND
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results directory from aah sweep")
    parser.add_argument("--out", type=Path, default=None, help="where REPORT.md goes")
    args = parser.parse_args(argv)
    print(build(args.results, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
