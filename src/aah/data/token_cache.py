"""The token cache: `<cache_dir>/<content_hash>/{train.bin, val.bin, meta.json}`.

The key hashes the exact corpus content (every document's name and bytes, in order) plus the
split settings, so an edited file can never be served stale tokens; file sizes and mtimes are
not trusted. Each file is written atomically (`aah.atomic`: temp file, fsync, `os.replace`);
`meta.json` goes last and is the commit marker. An entry counts only if its meta matches the
key and both `.bin` sizes match the meta, so a crash mid-write makes the next load rebuild
instead of reading half a cache. Concurrent writers (several ranks)
race harmlessly: they write identical bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aah.atomic import write_bytes_atomic
from aah.data.config import DataConfig
from aah.data.corpora import Document

#: Bumped whenever the byte layout of a cache entry or the split rule changes.
CACHE_FORMAT = 1
ENV_CACHE_DIR = "AAH_CACHE_DIR"


def cache_root(cfg: DataConfig) -> Path:
    """`$AAH_CACHE_DIR` when set and non-empty, else `cfg.cache_dir`, with "~" expanded."""
    env = os.environ.get(ENV_CACHE_DIR, "")
    return Path(env if env.strip() else cfg.cache_dir).expanduser()


def content_hash(docs: Sequence[Document], val_fraction: float, max_bytes: int | None) -> str:
    """Hex BLAKE2b-128 of the format, split settings and every (name, bytes) in order.

    Lengths are hashed before each variable-size field so no two inputs share a byte stream.
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(f"aah-data-v{CACHE_FORMAT}\0".encode())
    h.update(float(val_fraction).hex().encode() + b"\0")
    h.update(str(max_bytes).encode() + b"\0")
    for doc in docs:
        name = doc.rel.encode("utf-8")
        h.update(struct.pack("<Q", len(name)))
        h.update(name)
        h.update(struct.pack("<Q", len(doc.data)))
        h.update(doc.data)
    return h.hexdigest()


def load_entry(entry: Path, key: str) -> tuple[np.memmap, np.memmap, dict[str, Any]] | None:
    """(train, val, meta) memory-mapped read-only from a complete entry, else None."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
        ok = (
            meta.get("format") == CACHE_FORMAT
            and meta.get("content_hash") == key
            and (entry / "train.bin").stat().st_size == meta["n_train_tokens"] >= 1
            and (entry / "val.bin").stat().st_size == meta["n_val_tokens"] >= 1
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not ok:
        return None
    train = np.memmap(entry / "train.bin", dtype=np.uint8, mode="r")
    val = np.memmap(entry / "val.bin", dtype=np.uint8, mode="r")
    return train, val, meta


def store_entry(entry: Path, key: str, train: np.ndarray, val: np.ndarray, meta: dict) -> None:
    """Write a complete entry; `meta` gains format, key and token counts. Atomic per file."""
    entry.mkdir(parents=True, exist_ok=True)
    full_meta = {
        **meta,
        "format": CACHE_FORMAT,
        "content_hash": key,
        "n_train_tokens": int(train.size),
        "n_val_tokens": int(val.size),
    }
    write_bytes_atomic(entry / "train.bin", np.ascontiguousarray(train, dtype=np.uint8).data)
    write_bytes_atomic(entry / "val.bin", np.ascontiguousarray(val, dtype=np.uint8).data)
    write_bytes_atomic(
        entry / "meta.json", json.dumps(full_meta, indent=2, sort_keys=True).encode()
    )
