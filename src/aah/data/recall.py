"""`synthetic:recall`: multi-query associative recall at controlled distances.

The stream is a run of two-byte records `K v` (a key `A`... and its value), each after
`words` background words (see `aah.data.synthetic`). A record is either

- a *binding*: a key that no record within the last `seq_len` bytes uses, with a fresh
  random value; or
- a *query* (half the time, when one fits): a key bound earlier, repeated with its value,
  with the distance to the key's latest record drawn by picking a distance bucket uniformly
  and a key whose latest record lies in it.

The value byte of a query is its answer: predictable only from the key's latest record,
`distance` bytes back (and no nearer). Bindings are never reused within `seq_len` bytes, so
inside any window every key has one value. Queries are dense (a few bytes apart), so the
next-byte loss gets many supervised lookups per sequence.

Value bytes: with `fused` (the default) one byte >= 128 names the key and its value, so a
single attention hop from the key to that byte answers (learned within minutes on a CPU);
otherwise a digit, which needs an induction circuit (match the key, copy the byte after it)
that forms much later at small scale.
"""

from __future__ import annotations

import numpy as np

from aah.data.synthetic import (
    KEYS,
    VALUES,
    Draws,
    TaskStream,
    background,
    distance_buckets,
    lexicon,
)

FUSED_BASE = 128
QUERY_SHARE = 0.5  # records that try to be queries; the rest bind new keys when one is free


def generate_recall(
    n_tokens: int,
    seq_len: int,
    seed: int,
    *,
    words: int = 1,
    n_keys: int = 16,
    n_values: int = 8,
    edges: list[int] | None = None,
    fused: bool = True,
) -> TaskStream:
    """A stream of at least `n_tokens` bytes for windows of `seq_len` (module docstring)."""
    buckets = distance_buckets(seq_len, edges)
    if n_tokens < 1 or not buckets:
        raise ValueError(
            f"synthetic:recall needs n_tokens >= 1 and a sequence length > {buckets or 4}, "
            f"got {n_tokens} and {seq_len}"
        )
    if not (2 <= n_keys <= len(KEYS) and 2 <= n_values <= len(VALUES)) or (
        fused and FUSED_BASE + n_keys * n_values > 256
    ):
        raise ValueError(f"synthetic:recall: {n_keys} keys x {n_values} values do not fit")
    draws = Draws(seed)
    lex = lexicon()
    out = bytearray()
    answers: list[tuple[int, int]] = []  # (index of an answer byte, its distance)
    latest = [-(10**12)] * n_keys  # start of each key's latest record
    value = [0] * n_keys
    span = (buckets[0][0], buckets[-1][1])
    while len(out) < n_tokens:
        out += background(draws, lex, words)
        pos = len(out)
        key = _query(draws, latest, pos, buckets) if draws.uniform() < QUERY_SHARE else None
        if key is None:
            free = [k for k in range(n_keys) if pos - latest[k] > seq_len]
            if free:
                key = free[draws.below(len(free))]
                value[key] = draws.below(n_values)
                latest[key] = -(10**12)  # a binding: nothing to recall
            else:
                key = _query(draws, latest, pos, [span])
        if key is None:  # every key is too recent or too old to query, none free: wait
            out += background(draws, lex, 1)
            continue
        if pos - latest[key] <= seq_len:
            answers.append((pos + 1, pos - latest[key]))
        out += bytes((KEYS[key], value_byte(key, value[key], n_values, fused)))
        latest[key] = pos
    tokens = np.frombuffer(bytes(out), dtype=np.uint8).copy()
    dist = np.zeros(tokens.size, dtype=np.int32)
    if answers:
        idx, d = np.array(answers, dtype=np.int64).T
        dist[idx] = d
    return TaskStream(tokens, dist)


def value_byte(key: int, value: int, n_values: int, fused: bool) -> int:
    """A digit, or with `fused` one byte >= 128 that names the key and its value."""
    return FUSED_BASE + key * n_values + value if fused else VALUES[value]


def _query(draws: Draws, latest: list[int], pos: int, buckets: list[tuple[int, int]]) -> int | None:
    """A key whose latest record lies at a distance in a bucket drawn uniformly, or None."""
    lo, hi = buckets[draws.below(len(buckets))]
    cands = [k for k, p in enumerate(latest) if lo <= pos - p < hi]
    return cands[draws.below(len(cands))] if cands else None
