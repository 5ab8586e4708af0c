"""The synthetic screening suite (suite_helpers.py) and its report, shared by the suite report
tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_helpers import REGIMES, write_suite

from aah import records
from aah.cli import main
from aah.report.suite import REPORT


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_suite(tmp_path_factory.mktemp("results"), "screening", list(REGIMES))
    unfinished = root / "screening" / "budget-s2"  # started, not in the CSV yet
    unfinished.mkdir()
    records.write_json(unfinished / "cell.json", {"regime": "budget", "seed": 2})
    return root


@pytest.fixture(scope="module")
def report(results: Path) -> str:
    assert main(["report", str(results)]) == 0
    return (results / REPORT).read_text()
