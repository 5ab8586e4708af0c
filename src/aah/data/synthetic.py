"""Generated long-range tasks on the byte vocabulary: `synthetic:recall` and `synthetic:passkey`.

Each task is a byte stream plus, for every byte, its answer distance: `d > 0` marks an answer
byte that can only be predicted by copying the byte `d` positions earlier (its source); 0
marks every other byte. Training uses the ordinary next-byte loss on the stream; evaluation
also scores argmax accuracy at the answer bytes whose source lies in the same window,
overall and per distance bucket. Streams are pure functions of (config, sequence length,
seed); the train and validation streams use two fixed seeds, so validation is a held-out set
that is the same for every run and seed of one config.

The background between facts is words from a fixed lexicon (a seeded source with local
structure: a word's letters follow from its first ones), so short windows predict it and
only the answers need long ones. Alphabets are disjoint: background `a`-`p`, keys `A`-`Z`,
values `0`-`9` (or bytes >= 128, see `aah.data.recall`), markers `#`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

#: Fixes the lexicon (the same for every split and seed) and the two split seeds.
TASK_SEED = 20_261_201
LETTERS = b"abcdefghijklmnop"
KEYS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
VALUES = b"0123456789"
MARKER = ord("#")
FIRST_EDGE = 4  # the default buckets start at distance 4: [4, 8), [8, 16), ... up to T
LEXICON_SIZE = 64
#: Bytes generated for the train stream when data.max_bytes is not set; val is fixed.
TRAIN_BYTES = 2_000_000
VAL_BYTES = 262_144


@dataclass(frozen=True)
class TaskStream:
    """tokens (N,) uint8 and answer_distance (N,) int32 (see the module docstring)."""

    tokens: np.ndarray
    answer_distance: np.ndarray


def distance_buckets(seq_len: int, edges: list[int] | None = None) -> list[tuple[int, int]]:
    """[lo, hi) distance buckets: consecutive `edges`, or powers of two from 4 up to seq_len.

    ValueError names data.recall_buckets when explicit edges do not fit the sequence length.
    """
    if edges:
        if edges[-1] > seq_len:
            raise ValueError(
                f"data.recall_buckets: the last edge must be <= the sequence length {seq_len}, "
                f"got {list(edges)}"
            )
        return list(pairwise(edges))
    out, lo = [], FIRST_EDGE
    while lo < seq_len:
        out.append((lo, min(2 * lo, seq_len)))
        lo *= 2
    return out


def bucket_label(lo: int, hi: int) -> str:
    return f"{lo}-{hi - 1}"


class Draws:
    """Uniform floats from a seeded numpy generator, served one at a time from chunks
    (a scalar numpy call per draw would dominate the generation time)."""

    def __init__(self, seed: int, chunk: int = 65_536) -> None:
        self._rng = np.random.default_rng(seed)
        self._chunk = chunk
        self._buf: list[float] = []
        self._i = 0

    def uniform(self) -> float:
        if self._i == len(self._buf):
            self._buf, self._i = self._rng.random(self._chunk).tolist(), 0
        self._i += 1
        return self._buf[self._i - 1]

    def below(self, n: int) -> int:
        """An int in [0, n)."""
        return min(int(self.uniform() * n), n - 1)


def lexicon() -> list[bytes]:
    """The fixed background words: 64 words of 3 to 6 letters from `a`-`p`."""
    rng = np.random.default_rng(TASK_SEED)
    letters = np.frombuffer(LETTERS, dtype=np.uint8)
    return [rng.choice(letters, int(rng.integers(3, 7))).tobytes() for _ in range(LEXICON_SIZE)]


def background(draws: Draws, words: list[bytes], n_words: int) -> bytes:
    return b"".join(words[draws.below(len(words))] for _ in range(n_words))
