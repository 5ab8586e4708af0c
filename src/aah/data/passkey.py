"""`synthetic:passkey`: one fact at a controlled depth, asked at the end of the sequence.

The stream is a run of blocks of exactly `seq_len` bytes, so evaluation windows (contiguous
from the stream's start) are whole blocks. Each block is background words (see
`aah.data.synthetic`) with a needle `#dddd` (a fresh random passkey) somewhere in it, and ends
with the question `#` followed by the same passkey. The passkey bytes at the end are the
answers; their distance to the needle is drawn by picking a distance bucket uniformly and a
distance uniformly inside it. The marker `#` occurs nowhere else, so the only way to the
answer is back to the needle.
"""

from __future__ import annotations

import numpy as np

from aah.data.synthetic import (
    MARKER,
    VALUES,
    Draws,
    TaskStream,
    background,
    distance_buckets,
    lexicon,
)

PASSKEY_LEN = 4


def generate_passkey(
    n_tokens: int,
    seq_len: int,
    seed: int,
    *,
    n_values: int = len(VALUES),
    edges: list[int] | None = None,
) -> TaskStream:
    """At least `n_tokens` bytes in whole blocks of `seq_len` (module docstring)."""
    fact = PASSKEY_LEN + 1
    far = seq_len - 2 * fact  # the largest distance: the needle at the block's start
    buckets = [(max(lo, fact), min(hi, far + 1)) for lo, hi in distance_buckets(seq_len, edges)]
    buckets = [(lo, hi) for lo, hi in buckets if lo < hi]
    if n_tokens < 1 or not buckets:
        raise ValueError(
            f"synthetic:passkey needs n_tokens >= 1 and a sequence length >= {2 * fact + 4}, "
            f"got {n_tokens} and {seq_len}"
        )
    draws = Draws(seed)
    lex = lexicon()
    n_blocks = -(-n_tokens // seq_len)
    tokens = np.empty(n_blocks * seq_len, dtype=np.uint8)
    dist = np.zeros(tokens.size, dtype=np.int32)
    for b in range(n_blocks):
        lo, hi = buckets[draws.below(len(buckets))]
        d = lo + draws.below(hi - lo)
        key = bytes(MARKER if i == 0 else VALUES[draws.below(n_values)] for i in range(fact))
        ask = seq_len - fact  # where the question starts
        needle = ask - d
        text = background(draws, lex, seq_len // 3 + 1)  # words are >= 3 letters
        block = text[:needle] + key + text[needle : ask - fact] + key
        start = b * seq_len
        tokens[start : start + seq_len] = np.frombuffer(block, dtype=np.uint8)
        dist[start + ask + 1 : start + seq_len] = d
    return TaskStream(tokens, dist)
