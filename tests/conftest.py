"""Fixtures shared by the whole suite."""

from __future__ import annotations

import sysconfig
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


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    """~120 kB of real Python source in one file: quick to encode, enough to learn from."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = "".join(p.read_text(errors="ignore") for p in sorted(stdlib.glob("a*.py")))[:120_000]
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(text)
    return str(path)
