"""A copy of a `KVCache`'s state, to go back to: one prefill of a document, then each question
answered from the same cached document (`hf.run.cache.PerHeadCache.snapshot` / `restore`).

The copy is of the storage tensors (every bucket's sink and ring slots) and the position count;
restoring writes it back into the same tensors, so the store afterwards holds exactly, to the
bit, what it held when the snapshot was taken. A snapshot costs the store's reserved bytes
(`KVCache.reserved_nbytes`) once more.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aah.model.cache import KVCache


@dataclass(frozen=True)
class KVSnapshot:
    """The state of one `KVCache` (`store`, the one it restores into) after `length` positions:
    each bucket's (keys, values), layer by layer."""

    store: KVCache
    length: int
    tensors: tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], ...]

    @property
    def nbytes(self) -> int:
        """Bytes the copy itself takes."""
        return sum(
            t.numel() * t.element_size() for layer in self.tensors for kv in layer for t in kv
        )


def take_snapshot(store: KVCache) -> KVSnapshot:
    """A copy of `store`'s keys, values and position count."""
    tensors = tuple(tuple((b.k.clone(), b.v.clone()) for b in buckets) for buckets in store.layers)
    return KVSnapshot(store, store.length, tensors)


def restore_snapshot(store: KVCache, snapshot: KVSnapshot) -> None:
    """Write `snapshot` back into `store`, the store it was taken from; ValueError for another
    store (a cache rebuilt or reset since)."""
    if snapshot.store is not store:
        raise ValueError(
            "this snapshot was taken from another cache store (the cache was reset or rebuilt "
            "since); take a new snapshot after the prefill"
        )
    for buckets, saved in zip(store.layers, snapshot.tensors, strict=True):
        for b, (k, v) in zip(buckets, saved, strict=True):
            b.k.copy_(k)
            b.v.copy_(v)
    store.length = snapshot.length
