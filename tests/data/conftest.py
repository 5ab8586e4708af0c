"""Shared fixture: every data test writes its token cache under tmp_path, never ~/.cache."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache folder, selected through the AAH_CACHE_DIR override."""
    path = tmp_path / "cache"
    monkeypatch.setenv("AAH_CACHE_DIR", str(path))
    return path
