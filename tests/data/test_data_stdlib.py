"""The default corpus: the running Python's stdlib sources, capped by max_bytes to stay quick."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from data_helpers import val_by_hash

from aah.data import DataConfig, load_tokens


def test_stdlib_prefix_matches_sorted_py_files() -> None:
    s = load_tokens(DataConfig(max_bytes=200_000, val_fraction=0.2))
    assert s.name == "python-stdlib"
    root = Path(sysconfig.get_paths()["stdlib"])
    # Independent listing: all *.py, no site-/dist-packages, no hidden or __pycache__ folders.
    skip = {"site-packages", "dist-packages", "__pycache__"}
    files = sorted(
        (p.relative_to(root).as_posix(), p)
        for p in root.rglob("*.py")
        if p.is_file()
        and not any(part in skip or part.startswith(".") for part in p.relative_to(root).parts)
    )
    kept, total = [], 0
    for rel, p in files:
        data = p.read_bytes()
        if not data:
            continue
        kept.append((rel, data[: 200_000 - total]))
        total += len(kept[-1][1])
        if total >= 200_000:
            break
    train = b"\n\n".join(d for r, d in kept if not val_by_hash(r, 0.2))
    val = b"\n\n".join(d for r, d in kept if val_by_hash(r, 0.2))
    assert s.train.tobytes() == train and s.val.tobytes() == val
    assert s.train.size + s.val.size == 200_000 + 2 * (len(kept) - 2)
