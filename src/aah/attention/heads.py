"""Route heads to window buckets and back: split (B, H, T, D) into per-bucket head subsets,
merge bucket outputs into head order, both with cheap backwards.

Indexing each bucket out of q, k, v with plain autograd costs, per bucket and per tensor, a
zero-filled full-size gradient plus an accumulation add in the backward (measured ~5% of a
T=4096 training step with four window buckets). Here the backward writes every bucket's
gradient straight into one uninitialised buffer when the buckets partition the heads, and
zero-fills once and index-adds only when they overlap (GQA groups split across windows).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from aah.attention import workspace

Index = slice | tuple[int, ...]


@lru_cache(maxsize=1024)
def _runs(index: tuple[int, ...]) -> tuple[tuple[slice, slice], ...]:
    """(positions in the subset, heads of the whole) for each run of consecutive heads."""
    runs, start = [], 0
    for pos in range(1, len(index) + 1):
        if pos == len(index) or index[pos] != index[pos - 1] + 1:
            runs.append((slice(start, pos), slice(index[start], index[pos - 1] + 1)))
            start = pos
    return tuple(runs)


def _take(x: torch.Tensor, index: Index) -> torch.Tensor:
    """x[:, index]: a view for a slice; else a copy in x's dimension order, one block copy per
    run of consecutive heads (measured ~2x faster than advanced indexing on (B, T, H, D)
    memory, whose per-element gather also returns (B, H, T, D) memory)."""
    if isinstance(index, slice):
        return x[:, index]
    out = _empty_in_order(x, (x.shape[0], len(index), *x.shape[2:]), x.stride())
    for part, heads in _runs(index):
        out[:, part] = x[:, heads]
    return out


def _put(dst: torch.Tensor, index: Index, src: torch.Tensor) -> None:
    """dst[:, index] = src, run by run; the heads in index must be distinct."""
    if isinstance(index, slice):
        dst[:, index] = src
        return
    for part, heads in _runs(index):
        dst[:, heads] = src[:, part]


def _heads(index: Index, n_heads: int) -> list[int]:
    return list(range(n_heads))[index] if isinstance(index, slice) else list(index)


class _SplitHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, indices: tuple[Index, ...]):  # type: ignore[override]
        ctx.indices, ctx.shape, ctx.stride = indices, x.shape, x.stride()
        covered = [h for index in indices for h in _heads(index, x.shape[1])]
        ctx.partition = sorted(covered) == list(range(x.shape[1]))
        # Contiguous runs stay views (autograd forbids in-place use of them, which no
        # backend does); other index sets are gathered copies.
        return tuple(_take(x, index) for index in indices)

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        h = ctx.shape[1]
        like = next(g for g in grads if g is not None)
        # The input's own dimension order, so autograd need not copy the gradient to match.
        full = _empty_in_order(like, ctx.shape, ctx.stride)
        if ctx.partition and all(g is not None for g in grads):
            for grad, index in zip(grads, ctx.indices, strict=True):
                _put(full, index, grad)
            return full, None
        full.zero_()
        for grad, index in zip(grads, ctx.indices, strict=True):
            if grad is not None:
                full.index_add_(1, torch.tensor(_heads(index, h), device=full.device), grad)
        return full, None


def _empty_in_order(
    like: torch.Tensor, shape: tuple[int, ...], stride: tuple[int, ...]
) -> torch.Tensor:
    """An uninitialised dense tensor of `shape` whose dims are laid out in the order of
    `stride` (largest first), like torch.empty_like with preserve_format."""
    order = sorted(range(len(shape)), key=lambda i: (-stride[i], i))
    return workspace.empty(tuple(shape), like=like, order=tuple(order))


def split_heads(x: torch.Tensor, indices: tuple[Index, ...]) -> tuple[torch.Tensor, ...]:
    """`x[:, index]` for every index (a slice or a tuple of head ids; tuples may repeat)."""
    if not x.requires_grad or not torch.is_grad_enabled():
        return tuple(_take(x, index) for index in indices)
    return _SplitHeads.apply(x, indices)


class _MergeHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, indices: tuple[Index, ...], *parts: torch.Tensor):  # type: ignore[override]
        b, _, t, d = parts[0].shape
        h = sum(p.shape[1] for p in parts)
        ctx.indices = indices
        # (B, T, H, D) memory: the fused kernel's layout, and what the output projection reads.
        out = parts[0].new_empty(b, t, h, d).transpose(1, 2)
        for part, index in zip(parts, indices, strict=True):
            _put(out, index, part)
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return (None, *(_take(grad, index) for index in ctx.indices))


def merge_heads(parts: tuple[torch.Tensor, ...], indices: tuple[Index, ...]) -> torch.Tensor:
    """The inverse of `split_heads` for a partition: part i holds heads `indices[i]`."""
    return _MergeHeads.apply(indices, *parts)
