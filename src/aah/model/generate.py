"""Autoregressive decoding with a per-head KV cache: batched prefill, single-token steps.

Shapes: B batch, T prompt length, V vocab.

The prompt runs once through `GPT.forward` with an empty `KVCache` sized by the plan in force
(the batched `windowed_attention`, backend as configured, and the cache keeps each head's
window and sinks); each new token then runs the same forward on one position, attending over
the cache only. The total length (prompt + new tokens) may not exceed
`model.config.max_seq_len`: position tables end there, so such a request raises ValueError
rather than stopping early.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from aah.model.gpt import GPT
from aah.model.sampling import Sampling, sample


def check_prompt(model: GPT, idx: torch.Tensor, max_new_tokens: int) -> None:
    """Raise ValueError for max_new_tokens < 0 or a prompt that is not (B, T >= 1) token ids
    fitting max_seq_len with the new tokens."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
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


def stream(
    model: GPT, idx: torch.Tensor, max_new_tokens: int, sampling: Sampling | None = None
) -> Iterator[torch.Tensor]:
    """An iterator over the new tokens (B,), each yielded as soon as it is chosen; arguments
    as in `generate`, and checked now (ValueError), before any token is computed."""
    model.check_decodable()
    check_prompt(model, idx, max_new_tokens)
    return _tokens(model, idx, max_new_tokens, Sampling() if sampling is None else sampling)


def _tokens(
    model: GPT, idx: torch.Tensor, max_new_tokens: int, sampling: Sampling
) -> Iterator[torch.Tensor]:
    if max_new_tokens == 0:
        return
    generator = sampling.generator(idx.device)
    was_training = model.training
    model.eval()
    try:
        # inference_mode is entered per step, never held across a yield: the caller's code
        # between tokens must not run in it.
        with torch.inference_mode():
            # The last new token is never fed back, so the cache needs T + new - 1 positions.
            cache = model.make_cache(idx.shape[0], idx.shape[1] + max_new_tokens - 1)
            logits = model(idx, cache=cache)[:, -1]  # (B, V)
            token = sample(logits, sampling, generator)
        for i in range(max_new_tokens):
            yield token
            if i + 1 < max_new_tokens:
                with torch.inference_mode():
                    logits = model(token[:, None], cache=cache)[:, -1]
                    token = sample(logits, sampling, generator)
    finally:
        model.train(was_training)


def generate(
    model: GPT, idx: torch.Tensor, max_new_tokens: int, sampling: Sampling | None = None
) -> torch.Tensor:
    """Extend prompts idx (B, T) by max_new_tokens tokens; returns (B, T + max_new_tokens).

    Tokens are chosen as `sampling` says (None: `Sampling()`, temperature 1). Runs in eval
    mode under `torch.inference_mode` and restores the model's mode.

    Raises:
        ValueError: max_new_tokens < 0, a prompt that is not (B, T >= 1) LongTensor,
            T + max_new_tokens > max_seq_len, or a model the KV cache cannot decode.
    """
    new = list(stream(model, idx, max_new_tokens, sampling))
    if not new:
        return idx.clone()
    return torch.cat([idx, torch.stack(new, dim=1).to(idx.device)], dim=1)
