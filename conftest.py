"""Fixtures every test of the repository gets, the package's (tests/) and the studies'
(experiments/tests/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test writes its token cache under tmp_path (AAH_CACHE_DIR), never ~/.cache."""
    path = tmp_path / "cache"
    monkeypatch.setenv("AAH_CACHE_DIR", str(path))
    return path


@pytest.fixture(autouse=True)
def _one_thread():
    """Tests use tiny tensors on shared cores: one intra-op thread avoids hand-off stalls."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
