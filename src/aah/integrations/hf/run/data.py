"""Calibration and held-out text as (B, T) token batches for a Hugging Face model.

Accepted inputs: a string or list of strings (tokenised with `tokenizer`, or as UTF-8 bytes
when there is none, which only a byte-level model can read: vocab_size in [256, 512], e.g. the
tiny random models of tests), a list of token-id lists, or a LongTensor (N, T) / (T,).
Everything is joined into one token stream (at least 2 tokens: one to predict from) and cut
into blocks of `seq_len`; a shorter stream gives one shorter block, with a warning.

Text is read as a user's prompt is: a block of text starts with the ids the tokenizer puts
before any prompt (`prompt_prefix`: its BOS token, where it adds one, as `tokenizer(text)` does
by default), then `seq_len` minus that many tokens of the text. Token ids are taken as given.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

TextLike = str | Sequence[str] | Sequence[Sequence[int]] | torch.Tensor
#: the vocabularies text read as UTF-8 bytes suits: the 256 byte values and a few specials
BYTE_VOCAB = range(256, 513)


def encode(text: str, tokenizer: Any | None, vocab_size: int | None) -> list[int]:
    """Token ids of one string: `tokenizer.encode` without special tokens, else UTF-8 bytes
    (only for a byte-level model, see the module docstring; ValueError otherwise)."""
    if tokenizer is None:
        if vocab_size is not None and vocab_size < BYTE_VOCAB.start:
            raise ValueError(
                f"text without a tokenizer is read as bytes, which needs vocab_size >= 256 "
                f"(the model has {vocab_size}); pass a tokenizer or token ids"
            )
        if vocab_size is not None and vocab_size not in BYTE_VOCAB:
            raise ValueError(
                f"text needs the model's tokenizer: read as UTF-8 bytes it would be ids 0-255 "
                f"of a {vocab_size}-token vocabulary; pass tokenizer=, load the model with "
                "aah.hf.load_model (which keeps its tokenizer), or pass token ids"
            )
        return list(text.encode("utf-8"))
    try:
        return list(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:  # plain callables / tokenizers without that keyword
        return list(tokenizer.encode(text))


def prompt_prefix(tokenizer: Any | None) -> list[int]:
    """The ids `tokenizer(text)` puts before the text of every prompt (its BOS token where it
    adds one; [] for none, and for a byte-level model without a tokenizer). A model is only
    ever trained and prompted with them first, so text scored without them is text in a
    regime no user sends (on Gemma 3 270M, 0.34 nats worse at full attention)."""
    if tokenizer is None:
        return []
    probe = "a"
    try:
        with_specials = list(tokenizer(probe)["input_ids"])
    except (TypeError, KeyError):  # plain callables without the transformers interface
        return []
    plain = encode(probe, tokenizer, None)
    if not plain or len(with_specials) < len(plain):
        return []
    for start in range(len(with_specials) - len(plain) + 1):
        if with_specials[start : start + len(plain)] == plain:
            return with_specials[:start]
    return []


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
    if len(ids) < 2:
        raise ValueError(
            f"calibration/held-out data gives {len(ids)} token{'s' * (len(ids) != 1)}; at least "
            "2 are needed (one to predict the next from)"
        )
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
    """LongTensor batches (b <= batch_size, T): consecutive blocks of `seq_len` tokens, each
    block of text after the tokenizer's `prompt_prefix` (module docstring)."""
    if seq_len < 1 or batch_size < 1:
        raise ValueError(f"seq_len and batch_size must be >= 1, got {seq_len}, {batch_size}")
    is_text = isinstance(data, str) or (
        not isinstance(data, torch.Tensor) and any(isinstance(item, str) for item in data)
    )
    prefix = prompt_prefix(tokenizer) if is_text else []
    if len(prefix) >= seq_len:
        prefix = []  # a block too short to hold the prefix and a token to predict
    ids = torch.tensor(token_stream(data, tokenizer, vocab_size), dtype=torch.long)
    t = min(seq_len - len(prefix), ids.numel())
    if t + len(prefix) < seq_len:
        warnings.warn(
            f"the data gives {ids.numel()} tokens, fewer than seq_len {seq_len}: one block of "
            f"{t + len(prefix)} tokens",
            stacklevel=2,
        )
    blocks = ids[: ids.numel() // t * t].view(-1, t)
    if prefix:
        head = torch.tensor(prefix, dtype=torch.long).expand(blocks.shape[0], -1)
        blocks = torch.cat([head, blocks], dim=1)
    batches = list(torch.split(blocks, batch_size))
    return batches if max_batches is None else batches[:max_batches]
