"""The text a plan search and a heal read: the shipped mix's blocks at the T the model allows,
and any text as token batches.

Both `plan_search` (which measures on `MIX_BLOCKS` blocks of the mix and judges candidates on
the next `HELD_OUT_BLOCKS`) and `heal` (which trains past those) cut the mix the same way, so
a heal on the shipped mix never reads a block the search read.
"""

from __future__ import annotations

from typing import Any

import torch

from aah.integrations.hf.run.data import TextLike, token_batches

DEFAULT_SEQ_LEN = 512
#: blocks of the shipped mix a search reads when given no text
MIX_BLOCKS = 8
#: further blocks of the mix the choice judges candidate plans on
HELD_OUT_BLOCKS = 4


def model_positions(model: torch.nn.Module, seq_len: int | None) -> int:
    """`seq_len` (default `DEFAULT_SEQ_LEN`) capped by the model's maximum position count."""
    config = model.config
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    t = seq_len or DEFAULT_SEQ_LEN
    return min(t, int(limit)) if limit is not None else t


def shipped_mix(
    model: torch.nn.Module, tokenizer: Any | None, seq_len: int | None, n_blocks: int
) -> list[list[int]]:
    """`n_blocks` blocks of the shipped calibration mix (`hf.search.calibration_mix`) at the T a
    search of `seq_len` runs at, read with `tokenizer` (bytes for a byte-level model)."""
    from aah.integrations.hf.search.calibration_mix import calibration_mix

    vocab = getattr(model.config, "vocab_size", None)
    t = model_positions(model, seq_len)
    return calibration_mix(tokenizer, seq_len=t, n_blocks=n_blocks, vocab_size=vocab)


def calibration_batches(
    model: torch.nn.Module,
    data: TextLike,
    *,
    seq_len: int | None = None,
    batch_size: int = 1,
    max_batches: int | None = None,
    tokenizer: Any | None = None,
) -> list[torch.Tensor]:
    """`data` as token batches for `model`, T capped by its maximum position count."""
    t = model_positions(model, seq_len)
    vocab = getattr(model.config, "vocab_size", None)
    return token_batches(
        data,
        t,
        batch_size=batch_size,
        tokenizer=tokenizer,
        vocab_size=vocab,
        max_batches=max_batches,
    )
