"""`synthetic:recall`: associative recall at controlled distances over a local background.

A byte stream, generated from a seed, that no model can predict well without attending far
back, and only at known positions:

- background: words drawn at random from a fixed lexicon of 64 words of 3 to 6 letters
  (fixed by `TASK_SEED`, the same for every split): local structure that short windows
  capture (a word's letters follow from its first ones);
- records `#KK=VVVV`: a key of two capitals, a value of four digits, fresh and random;
- queries: a record written again, word for word, `distance` bytes after its latest copy
  (so no nearer copy exists), with `distance` drawn from power-of-two buckets [16, 32),
  [32, 64), ... up to the sequence length. The four value bytes of a query are its
  answers: predictable only by finding the key earlier in the context and copying what
  followed it.

The stream is stationary (records and queries keep coming), so any training window holds
answerable queries and the ordinary next-byte loss trains on them. `answer_distance[i] = d`
marks byte i as an answer whose source byte is i - d (0 elsewhere): an answer counts for
accuracy in a window only when its source lies in the same window.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

#: Fixes the background chain, the same for every split and seed.
TASK_SEED = 20_261_201
LETTERS = np.frombuffer(b"abcdefghijklmnop", dtype=np.uint8)
CAPITALS = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", dtype=np.uint8)
DIGITS = np.frombuffer(b"0123456789", dtype=np.uint8)
RECORD_LEN = 8  # '#', 2 key bytes, '=', 4 value bytes
VALUE_AT = 4  # offset of the first value byte in a record
MIN_DISTANCE = 16


@dataclass(frozen=True)
class RecallStream:
    """tokens (N,) uint8 and answer_distance (N,) int32 (see the module docstring)."""

    tokens: np.ndarray
    answer_distance: np.ndarray


def distance_buckets(seq_len: int) -> list[tuple[int, int]]:
    """[lo, hi) power-of-two distance buckets from 16 up to the sequence length."""
    out, lo = [], MIN_DISTANCE
    while lo < seq_len:
        out.append((lo, min(2 * lo, seq_len)))
        lo *= 2
    return out


def bucket_label(lo: int, hi: int) -> str:
    return f"{lo}-{hi - 1}"


def _lexicon() -> list[np.ndarray]:
    rng = np.random.default_rng(TASK_SEED)
    return [rng.choice(LETTERS, int(rng.integers(3, 7))) for _ in range(64)]


def generate_recall(n_tokens: int, seq_len: int, seed: int, words: int = 3) -> RecallStream:
    """A stream of at least `n_tokens` bytes for sequences of `seq_len` (module docstring),
    with `words` background words before each record."""
    if n_tokens < 1 or seq_len < 2 * MIN_DISTANCE:
        raise ValueError(
            f"synthetic:recall needs n_tokens >= 1 and a sequence length >= {2 * MIN_DISTANCE}, "
            f"got {n_tokens} and {seq_len}"
        )
    rng = np.random.default_rng(seed)
    buckets = distance_buckets(seq_len)
    pieces: list[np.ndarray] = []
    dists: list[np.ndarray] = []
    records: deque[tuple[int, bytes]] = deque()  # (start, the 8 bytes), the last T bytes'
    lexicon = _lexicon()
    pos = 0
    while pos < n_tokens:
        picks = rng.integers(len(lexicon), size=words)
        text = np.concatenate([lexicon[i] for i in picks]) if words else np.empty(0, np.uint8)
        pieces.append(text)
        dists.append(np.zeros(text.size, dtype=np.int32))
        pos += text.size
        while records and pos - records[0][0] >= seq_len:
            records.popleft()
        record, distance = _next_record(rng, records, pos, buckets, seq_len)
        pieces.append(np.frombuffer(record, dtype=np.uint8))
        marks = np.zeros(RECORD_LEN, dtype=np.int32)
        if distance:
            marks[VALUE_AT:] = distance
            records.remove((pos - distance, record))  # the latest copy is the source from now on
        records.append((pos, record))
        dists.append(marks)
        pos += RECORD_LEN
    return RecallStream(np.concatenate(pieces), np.concatenate(dists))


def _next_record(
    rng: np.random.Generator,
    records: deque[tuple[int, bytes]],
    pos: int,
    buckets: list[tuple[int, int]],
    seq_len: int,
) -> tuple[bytes, int]:
    """A query of an earlier record (half the time, if one lies in the drawn bucket) or a new
    record whose key no record within the last `seq_len` bytes uses."""
    if rng.random() < 0.5:
        lo, hi = buckets[int(rng.integers(len(buckets)))]
        in_range = [(p, r) for p, r in records if lo <= pos - p < hi]
        if in_range:
            p, record = in_range[int(rng.integers(len(in_range)))]
            return record, pos - p
    recent = {r[1:3] for _, r in records}
    while True:
        key = bytes(rng.choice(CAPITALS, 2))
        if key not in recent:
            break
    value = bytes(rng.choice(DIGITS, 4))
    return b"#" + key + b"=" + value, 0
