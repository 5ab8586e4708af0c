"""Train/validation split of a corpus, by file, decided by a stable hash of each name.

Rule (documented contract):

- Each document's relative POSIX path `rel` is hashed with 64-bit BLAKE2b; reading the
  digest as a big-endian integer h, the document goes to validation iff h / 2**64 <
  val_fraction. The decision depends on the name only, so it never changes when other files
  are added, removed or edited.
- With two or more documents both splits are made non-empty: if validation came out empty,
  the document with the smallest hash moves to it; if training came out empty, the one with
  the largest hash moves back.
- A single document is split by bytes: its last max(1, round(n * val_fraction)) bytes (at
  most n - 1) go to validation; it counts as one file in each split.
- Within a split, documents keep the stable corpus order and are joined with the separator
  b"\\n\\n" between consecutive documents (none before the first or after the last).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aah.data.corpora import Document

SEPARATOR = b"\n\n"


def path_hash(rel: str) -> int:
    """The 64-bit BLAKE2b hash of a relative path, as an unsigned integer."""
    return int.from_bytes(hashlib.blake2b(rel.encode("utf-8"), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class SplitPlan:
    """The byte pieces of each split, in order, before joining."""

    train: tuple[bytes, ...]
    val: tuple[bytes, ...]
    n_files_train: int
    n_files_val: int


def plan_split(docs: Sequence[Document], val_fraction: float) -> SplitPlan:
    """Assign documents to train/val by the rule in this module's docstring.

    Raises `ValueError` for no documents, or a single document shorter than 2 bytes.
    """
    if not docs:
        raise ValueError("cannot split an empty corpus")
    if len(docs) == 1:
        data = docs[0].data
        n = len(data)
        if n < 2:
            raise ValueError(f"a single-file corpus needs >= 2 bytes to split, got {n}")
        n_val = min(n - 1, max(1, round(n * val_fraction)))
        return SplitPlan((data[: n - n_val],), (data[n - n_val :],), 1, 1)
    hashes = [path_hash(d.rel) for d in docs]
    is_val = [h / 2**64 < val_fraction for h in hashes]
    if not any(is_val):
        is_val[min(range(len(docs)), key=hashes.__getitem__)] = True
    elif all(is_val):
        is_val[max(range(len(docs)), key=hashes.__getitem__)] = False
    train = tuple(d.data for d, v in zip(docs, is_val, strict=True) if not v)
    val = tuple(d.data for d, v in zip(docs, is_val, strict=True) if v)
    return SplitPlan(train, val, len(train), len(val))


def join_pieces(pieces: Sequence[bytes]) -> np.ndarray:
    """One split's pieces joined with `SEPARATOR`, as uint8 tokens (bytes are the tokens)."""
    return np.frombuffer(SEPARATOR.join(pieces), dtype=np.uint8)
