"""Stream one long token sequence through a model chunk by chunk and measure each chunk: its
perplexity, the KV bytes the cache holds after it and the tokens per second of its forward.

    hf.apply(model, plan)
    rows = stream_perplexity(model, ids, cache=hf.per_head_cache(model, rolling=True))

Chunk i covers tokens [a, b); its perplexity scores those tokens, each predicted from
everything before it (the first chunk's first token, having no context, is not scored; a
chunk's first token is scored by the previous chunk's last logits). The cache carries
everything between chunks, so the same call measures a rolling per-head cache, a plain
`DynamicCache` (full attention, up to the model's positions: `limit`) or any other cache.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from aah.integrations.hf.run.model_layout import cache_keyword

MB = 2**20


@dataclass(frozen=True)
class StreamRow:
    """One chunk: tokens seen after it, its perplexity, the KV MB held after it, its forward's
    tokens per second."""

    position: int
    perplexity: float
    kv_mb: float
    tokens_per_s: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def held_bytes(cache: Any) -> int:
    """Bytes of keys and values a cache holds: its own count (`nbytes()`) where it keeps one,
    else the sum over its layers' key and value tensors (transformers' DynamicCache)."""
    counted = getattr(cache, "nbytes", None)
    if callable(counted):
        return int(counted())
    total = 0
    for layer in getattr(cache, "layers", ()):
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def stream_perplexity(
    model: torch.nn.Module,
    ids: torch.Tensor,
    cache: Any,
    *,
    chunk: int = 512,
    limit: int | None = None,
    on_row: Callable[[StreamRow], None] | None = None,
) -> list[StreamRow]:
    """Feed `ids` ((N,) or (1, N) token ids) to `model` in chunks of `chunk` tokens over
    `cache`, and return one `StreamRow` per chunk; `limit`: stop once that many tokens were
    fed (a full cache at the model's positions); `on_row` sees each row as it comes."""
    ids = ids.reshape(1, -1) if ids.dim() == 1 else ids
    if ids.shape[0] != 1 or ids.shape[1] < 2:
        raise ValueError(
            f"stream_perplexity takes one row of >= 2 token ids, got shape {tuple(ids.shape)}"
        )
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    end = ids.shape[1] if limit is None else min(limit, ids.shape[1])
    rows, previous = [], None
    device = next(model.parameters()).device
    name = cache_keyword(model)
    with torch.no_grad():
        for a in range(0, end, chunk):
            piece = ids[:, a : min(end, a + chunk)].to(device)
            start = time.perf_counter()
            logits = model(piece, use_cache=True, **{name: cache}).logits
            seconds = time.perf_counter() - start
            nll, count = _chunk_nll(logits[0], piece[0], previous)
            previous = logits[0, -1]
            row = StreamRow(
                position=a + piece.shape[1],
                perplexity=math.exp(nll / count) if count else float("nan"),
                kv_mb=held_bytes(cache) / MB,
                tokens_per_s=piece.shape[1] / seconds,
            )
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def _chunk_nll(
    logits: torch.Tensor, targets: torch.Tensor, previous: torch.Tensor | None
) -> tuple[float, int]:
    """Summed negative log-likelihood of the chunk's tokens (logits (n, V) of its positions,
    targets (n,)) and how many were scored: token i by logits i - 1, the first by `previous`
    (the last chunk's last logits; not scored without)."""
    scores = logits[:-1]
    wanted = targets[1:]
    if previous is not None:
        scores = torch.cat([previous[None], scores])
        wanted = targets
    if not wanted.numel():
        return 0.0, 0
    nll = torch.nn.functional.cross_entropy(scores.float(), wanted, reduction="sum")
    return float(nll), int(wanted.numel())
