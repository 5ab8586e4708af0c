"""Autoregressive decoding with a per-head KV cache: batched prefill, single-token steps.

Shapes: B batch, T prompt length, V vocab, C d_model.

The prompt runs once through the model's own batched forward (`windowed_attention`, backend
as configured); its keys and values fill a `KVCache` sized by the plan in force. Each new
token then runs the blocks on one position, attending over the ring buffers only.
The total length (prompt + new tokens) may not exceed `model.config.max_seq_len`: position
tables end there, so such a request raises ValueError rather than stopping early.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from aah.model.cache import KVCache

if TYPE_CHECKING:
    from aah.model.gpt import GPT


def check_sampling(
    max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None
) -> None:
    """Raise ValueError naming the first bad sampling parameter."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
    if top_p is not None and (not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")


def check_prompt(model: GPT, idx: torch.Tensor, max_new_tokens: int) -> None:
    """Raise ValueError for a prompt that is not (B, T >= 1) token ids fitting max_seq_len."""
    limit = model.config.max_seq_len
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype != torch.long:
        shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
        raise ValueError(f"idx must be a (B, T) LongTensor, got {shape}")
    b, t = idx.shape
    if b < 1 or t < 1:
        raise ValueError(f"idx must hold at least one token per row, got shape {(b, t)}")
    if t > limit:
        raise ValueError(f"prompt length {t} exceeds model.max_seq_len {limit}")
    if t + max_new_tokens > limit:
        raise ValueError(
            f"prompt length {t} + max_new_tokens {max_new_tokens} = {t + max_new_tokens} "
            f"exceeds model.max_seq_len {limit}"
        )


def prefill(model: GPT, idx: torch.Tensor, max_len: int) -> tuple[torch.Tensor, KVCache]:
    """Run the prompt (B, T) in one batched forward; return the last position's logits (B, V)
    and a cache holding each head's last min(C, T) keys/values, room for `max_len` positions."""
    cfg = model.config
    logits, captured = model(idx, capture_qkv=True)  # k already position-rotated
    k0 = captured[0][1]
    cache = KVCache(
        model.window_plan(),
        n_kv_head=cfg.n_kv_head,
        head_dim=cfg.head_dim,
        batch=idx.shape[0],
        max_len=max_len,
        dtype=k0.dtype,
        device=k0.device,
        sinks=model.sink_plan(),
    )
    for layer, (_, k, v) in enumerate(captured):
        cache.prefill(layer, k, v)
    cache.advance(idx.shape[1])
    return logits[:, -1], cache


def decode_step(model: GPT, cache: KVCache, tokens: torch.Tensor) -> torch.Tensor:
    """Feed one token per row (B,) at position `cache.length`; return its logits (B, V)."""
    t = cache.length
    if t >= model.config.max_seq_len:
        raise ValueError(f"position {t} is beyond model.max_seq_len {model.config.max_seq_len}")
    scale = 1.0 / math.sqrt(model.config.head_dim)
    x = model.embed(tokens[:, None])  # (B, 1, C)
    pos = model.position.embed(1, x.device, t)
    if pos is not None:
        x = x + pos
    x = model.drop(x)
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = attn.project(block.norm1(x), model.position, t)
        y = cache.attend(layer, q, k, v, scale)  # (B, Hq, 1, D)
        x = x + attn.dropout(attn.proj(y.reshape(x.shape[0], 1, -1)))
        x = x + block.mlp(block.norm2(x))
    cache.advance(1)
    return F.linear(model.norm(x[:, 0]), model.embed.weight)  # tied: (B, V)


def sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Next token per row (B,) from logits (B, V); temperature 0 is greedy (argmax)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token once the mass before it already reaches top_p (the first always stays).
        drop = (cum - sorted_logits.softmax(dim=-1)) >= top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def check_decodable(model: GPT) -> None:
    """The KV cache decodes plain softmax attention with rope/learned/no positions only."""
    cfg = model.config
    if cfg.attention != "softmax" or cfg.position in ("alibi", "relative"):
        raise ValueError(
            "cached decoding supports model.attention 'softmax' with rope/learned/none "
            f"positions only, got attention {cfg.attention!r}, position {cfg.position!r}"
        )


def stream(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
) -> Iterator[torch.Tensor]:
    """An iterator over the new tokens (B,), each yielded as soon as it is chosen; arguments
    as in `generate`, and checked now (ValueError), before any token is computed."""
    check_decodable(model)
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    check_prompt(model, idx, max_new_tokens)
    return _tokens(model, idx, max_new_tokens, temperature, top_k, top_p, seed)


def _tokens(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int | None,
) -> Iterator[torch.Tensor]:
    if max_new_tokens == 0:
        return
    generator = None
    if seed is not None and temperature > 0:
        generator = torch.Generator(device=idx.device).manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        # inference_mode is entered per step, never held across a yield: the caller's code
        # between tokens must not run in it.
        with torch.inference_mode():
            # The last new token is never fed back, so the cache needs T + new - 1 positions.
            logits, cache = prefill(model, idx, idx.shape[1] + max_new_tokens - 1)
            token = sample(logits, temperature, top_k, top_p, generator)
        for i in range(max_new_tokens):
            yield token
            if i + 1 < max_new_tokens:
                with torch.inference_mode():
                    logits = decode_step(model, cache, token)
                    token = sample(logits, temperature, top_k, top_p, generator)
    finally:
        model.train(was_training)


def generate(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
) -> torch.Tensor:
    """Extend prompts idx (B, T) by max_new_tokens tokens; returns (B, T + max_new_tokens).

    temperature 0 is greedy; otherwise logits / temperature, optionally restricted to the
    top_k tokens and/or the smallest set holding top_p of the mass, are sampled with a
    `torch.Generator` seeded by `seed` (None: torch's global generator). Runs in eval mode
    under `torch.inference_mode` and restores the model's mode.

    Raises:
        ValueError: max_new_tokens < 0, temperature < 0, top_k < 1, top_p outside (0, 1],
            a prompt that is not (B, T >= 1) LongTensor, or T + max_new_tokens > max_seq_len.
    """
    new = list(stream(model, idx, max_new_tokens, temperature, top_k, top_p, seed))
    if not new:
        return idx.clone()
    return torch.cat([idx, torch.stack(new, dim=1).to(idx.device)], dim=1)
