"""Fixtures shared by the whole suite."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    """~120 kB of real Python source in one file: quick to encode, enough to learn from."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = "".join(p.read_text(errors="ignore") for p in sorted(stdlib.glob("a*.py")))[:120_000]
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="session")
def replay_source(tmp_path_factory: pytest.TempPathFactory):
    """Factory (n_layer, n_head, seq_len) -> a finished run directory (summary.json and a
    plans.jsonl of full attention, then candidate windows from step 2, changed at step 4),
    for the replay policies."""
    import json

    def make(n_layer: int, n_head: int, seq_len: int) -> str:
        run = tmp_path_factory.mktemp("replay-source")
        wins = [seq_len // 8, seq_len // 4, seq_len // 2, seq_len]
        plans = [
            (0, [[seq_len] * n_head for _ in range(n_layer)]),
            (2, [[wins[(l + h) % 4] for h in range(n_head)] for l in range(n_layer)]),
            (4, [[wins[(l * h) % 4] for h in range(n_head)] for l in range(n_layer)]),
        ]
        lines = [json.dumps({"step": s, "windows": w}) for s, w in plans]
        (run / "plans.jsonl").write_text("\n".join(lines) + "\n")
        (run / "summary.json").write_text("{}")
        return str(run)

    return make
