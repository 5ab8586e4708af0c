"""Test helpers for aah.data: fixtures on disk and the split rule, computed independently."""

from __future__ import annotations

import hashlib
from pathlib import Path


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    """Create `files` (relative POSIX path -> bytes) under `root`; return `root`."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def hash64(rel: str) -> int:
    """64-bit BLAKE2b of a relative path as a big-endian int, as the split rule documents."""
    return int.from_bytes(hashlib.blake2b(rel.encode("utf-8"), digest_size=8).digest(), "big")


def val_by_hash(rel: str, val_fraction: float) -> bool:
    """The documented split rule (before the non-empty fix-up), computed independently."""
    return hash64(rel) / 2**64 < val_fraction
