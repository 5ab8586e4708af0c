"""Calibration and held-out text as (B, T) token batches for a Hugging Face model.

Accepted inputs: a string or list of strings (tokenised with `tokenizer`, or as UTF-8 bytes
when there is none: a stand-in that needs vocab_size >= 256 and is meant for tests and random
models), a list of token-id lists, or a LongTensor (N, T) / (T,). Everything is joined into
one token stream and cut into blocks of `seq_len` (a shorter stream gives one shorter block).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

TextLike = str | Sequence[str] | Sequence[Sequence[int]] | torch.Tensor


def encode(text: str, tokenizer: Any | None, vocab_size: int | None) -> list[int]:
    """Token ids of one string: `tokenizer.encode` without special tokens, else UTF-8 bytes."""
    if tokenizer is None:
        if vocab_size is not None and vocab_size < 256:
            raise ValueError(
                f"text without a tokenizer is read as bytes, which needs vocab_size >= 256 "
                f"(the model has {vocab_size}); pass a tokenizer or token ids"
            )
        return list(text.encode("utf-8"))
    try:
        return list(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:  # plain callables / tokenizers without that keyword
        return list(tokenizer.encode(text))


def token_stream(
    data: TextLike, tokenizer: Any | None = None, vocab_size: int | None = None
) -> list[int]:
    """All of `data` as one list of token ids (see the module docstring)."""
    if isinstance(data, torch.Tensor):
        if data.dim() not in (1, 2) or data.dtype.is_floating_point:
            raise ValueError(
                f"token tensor must be integer (N, T) or (T,), got {tuple(data.shape)}"
            )
        ids = data.reshape(-1).tolist()
    elif isinstance(data, str):
        ids = encode(data, tokenizer, vocab_size)
    else:
        ids = []
        for item in data:
            if isinstance(item, str):
                ids.extend(encode(item, tokenizer, vocab_size))
            else:
                ids.extend(int(t) for t in item)
    if not ids:
        raise ValueError("calibration/held-out data is empty")
    if vocab_size is not None and (min(ids) < 0 or max(ids) >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got {min(ids)}..{max(ids)}")
    return ids


def token_batches(
    data: TextLike,
    seq_len: int,
    *,
    batch_size: int = 1,
    tokenizer: Any | None = None,
    vocab_size: int | None = None,
    max_batches: int | None = None,
) -> list[torch.Tensor]:
    """LongTensor batches (b <= batch_size, T): consecutive blocks of `seq_len` tokens."""
    if seq_len < 1 or batch_size < 1:
        raise ValueError(f"seq_len and batch_size must be >= 1, got {seq_len}, {batch_size}")
    ids = torch.tensor(token_stream(data, tokenizer, vocab_size), dtype=torch.long)
    t = min(seq_len, ids.numel())
    blocks = ids[: ids.numel() // t * t].view(-1, t)
    batches = list(torch.split(blocks, batch_size))
    return batches if max_batches is None else batches[:max_batches]
