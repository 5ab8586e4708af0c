"""Study-test setup: the tiny random HF models of tests/integrations (`hf_models`) are
importable here too, as they are there (pytest puts a test's own folder on sys.path)."""

from __future__ import annotations

import sys
from pathlib import Path

_INTEGRATIONS = str(Path(__file__).resolve().parents[2] / "tests" / "integrations")
if _INTEGRATIONS not in sys.path:
    sys.path.insert(0, _INTEGRATIONS)
