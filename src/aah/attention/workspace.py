"""Buffers the banded engines keep across calls, so repeated calls stop page-faulting memory in.

A CPU call of the banded backend allocates tens of MB (block probabilities, span gradients,
outputs, gradients). glibc serves blocks that large with fresh mmap'd pages and returns them to
the operating system when freed, so every call faults all of them in again: measured ~15-20% of
a w=128 forward + backward at T=4096. The engines take such buffers from here instead.

The pool holds storages and hands one out only when nothing else references it: its use count
is the pool's own. A buffer given to autograd (saved for the backward, returned as the output
or as a gradient that becomes a `.grad`) is therefore never handed out again while anyone holds
it, and becomes reusable once the last reference is gone. Nothing is returned explicitly.

Bounded: at most `workspace_limit()` bytes are pooled (1 GiB by default, or AAH_WORKSPACE_MB
megabytes; 0 turns pooling off); a request beyond that is a plain allocation.
`release_workspaces()` drops every pooled storage (memory held by a tensor still in use is
freed when that tensor goes). Used on CPU only and outside tracing and inference mode;
elsewhere (CUDA has its own caching allocator) this is `torch.empty`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import torch

_LOCK = threading.Lock()
# (nbytes, device) -> storages of that size; least recently used keys first.
_POOL: OrderedDict[tuple[int, torch.device], list[torch.UntypedStorage]] = OrderedDict()


def _limit_from_env() -> int:
    text = os.environ.get("AAH_WORKSPACE_MB", "1024")
    try:
        mb = int(text)
    except ValueError:
        raise ValueError(f"AAH_WORKSPACE_MB must be an int >= 0 (MB), got {text!r}") from None
    if mb < 0:
        raise ValueError(f"AAH_WORKSPACE_MB must be an int >= 0 (MB), got {text!r}")
    return mb * 2**20


_STATE = {"bytes": 0, "limit": _limit_from_env()}
# Private PyTorch hooks; without them nothing is pooled.
_use_count = getattr(torch._C, "_storage_Use_Count", None)
_dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", None)


def workspace_limit(nbytes: int | None = None) -> int:
    """The pool's byte limit; with `nbytes`, set it (0 turns pooling off) and forget storages
    beyond it, idle ones first. Returns the limit in force before the call."""
    with _LOCK:
        before = _STATE["limit"]
        if nbytes is not None:
            if nbytes < 0:
                raise ValueError(f"workspace limit must be >= 0 bytes, got {nbytes}")
            _STATE["limit"] = nbytes
            _evict_idle(0)
            _evict_idle(0, in_use_too=True)
        return before


def release_workspaces() -> int:
    """Drop every pooled storage; returns the bytes the pool held (in use or idle)."""
    with _LOCK:
        held = _STATE["bytes"]
        _POOL.clear()
        _STATE["bytes"] = 0
        return held


def pooled_bytes() -> int:
    """Bytes of storage the pool holds now (in use or idle)."""
    return _STATE["bytes"]


def empty(
    shape: tuple[int, ...],
    *,
    like: torch.Tensor,
    order: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """An uninitialised tensor of `shape` with `like`'s dtype and device, from the pool when
    possible. `order`: the dimensions from outermost to innermost in memory (default: in
    order, a contiguous tensor); the result is that dense layout permuted back to `shape`."""
    dims = tuple(range(len(shape))) if order is None else order
    stored = [shape[d] for d in dims]
    numel = 1
    for size in stored:
        numel *= size
    buffer = _pooled(stored, numel * like.element_size(), like) if _poolable(like) else None
    if buffer is None:
        buffer = like.new_empty(stored)
    return buffer if order is None else buffer.permute([dims.index(d) for d in range(len(shape))])


def empty_like(x: torch.Tensor) -> torch.Tensor:
    """`torch.empty_like(x)` (x's dimension order in memory kept) from the pool."""
    order = sorted(range(x.dim()), key=lambda i: (-x.stride(i), i))
    return empty(tuple(x.shape), like=x, order=tuple(order))


def _poolable(like: torch.Tensor) -> bool:
    return (
        _use_count is not None
        and like.device.type == "cpu"
        and _STATE["limit"] > 0
        and not torch.is_inference_mode_enabled()
        and not torch.compiler.is_compiling()
        and _dispatch_depth is not None
        and _dispatch_depth() == 0  # no fake / functional tensor mode active
    )


def _pooled(stored: list[int], nbytes: int, like: torch.Tensor) -> torch.Tensor | None:
    """A tensor over an idle pooled storage of exactly nbytes, or over a new pooled one; None
    when the limit is reached (the caller allocates on its own)."""
    key = (nbytes, like.device)
    with _LOCK:  # the tensor takes its reference to the storage before the lock is released
        held = _POOL.get(key)
        if held is not None:
            _POOL.move_to_end(key)
            for storage in held:
                # Idle: only the pool references it (and nobody resized it while using it).
                if _use_count(storage._cdata) == 1 and storage.nbytes() == nbytes:
                    return like.new_empty(0).set_(storage, 0, stored)
        if _STATE["bytes"] + nbytes > _STATE["limit"]:
            _evict_idle(nbytes)
            if _STATE["bytes"] + nbytes > _STATE["limit"]:
                return None
        storage = torch.UntypedStorage(nbytes, device=like.device)
        _POOL.setdefault(key, []).append(storage)
        _STATE["bytes"] += nbytes
        return like.new_empty(0).set_(storage, 0, stored)


def _evict_idle(needed: int, in_use_too: bool = False) -> None:
    """Drop storages, least recently used sizes first, until `needed` more bytes fit: idle ones,
    and with `in_use_too` ones still in use as well (the pool forgets them; their memory goes
    when their last user lets go). Called under the lock."""
    for key in list(_POOL):
        if _STATE["bytes"] + needed <= _STATE["limit"]:
            return
        held = _POOL[key]
        for storage in [s for s in held if in_use_too or _use_count(s._cdata) == 1]:
            held.remove(storage)
            _STATE["bytes"] -= key[0]
        if not held:
            del _POOL[key]
