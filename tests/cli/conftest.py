import sysconfig
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AAH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> str:
    """~120 kB of real Python source in one file: quick to encode, enough to learn from."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = "".join(p.read_text(errors="ignore") for p in sorted(stdlib.glob("a*.py")))[:120_000]
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(text)
    return str(path)
