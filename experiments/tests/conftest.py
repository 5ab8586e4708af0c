"""Study-test setup: the tiny random HF models of tests/integrations (`hf_models`) and the
synthetic suite of tests/report (`suite_helpers`) are importable here too, as they are there
(pytest puts a test's own folder on sys.path)."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[2] / "tests"
for _folder in (str(_TESTS / "integrations"), str(_TESTS / "report")):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)
