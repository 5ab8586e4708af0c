"""Batches of (x, y) windows: random for training (`BatchLoader`), in order for eval.

Shapes: x, y are (B, T) int64 token ids with y[:, t] == x[:, t + 1] in the corpus, i.e.
each batch row is a window of T + 1 consecutive tokens split into input and target.

On request (a generated task's per-token answer distances given, see aah.data.synthetic),
batches also carry `a`, (B, T) int64: a[:, t] = d > 0 when target y[:, t] is an answer whose
source lies d tokens earlier inside the same window, else 0 (answers whose source the window
cut off cannot be recalled, so they are not marked).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, get_args

import numpy as np
import torch

_STATE_KEYS = ("seed", "rank", "world_size", "batch_size", "seq_len", "n_tokens", "batches")


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def answer_marks(answers: np.ndarray, starts: np.ndarray, seq_len: int) -> torch.Tensor:
    """(len(starts), seq_len) int64: the answer distance of each target of the windows at
    `starts`, kept only where the source is inside the window (module docstring)."""
    d = np.asarray(answers[starts[:, None] + np.arange(1, seq_len + 1)], dtype=np.int64)
    # target t is token start + t + 1; its source, t + 1 - d tokens into the window
    d[np.arange(1, seq_len + 1) - d < 0] = 0
    return torch.from_numpy(d)


def _check_answers(answers: np.ndarray | None, tokens: np.ndarray) -> np.ndarray | None:
    if answers is not None and (answers.ndim != 1 or answers.size != tokens.size):
        raise ValueError(
            f"answers must be a 1-D array as long as tokens ({tokens.size}), got {answers.shape}"
        )
    return answers


def _check_tokens(tokens: np.ndarray, seq_len: int) -> np.ndarray:
    if not isinstance(tokens, np.ndarray) or tokens.ndim != 1:
        raise ValueError("tokens must be a 1-D numpy array")
    if tokens.size < seq_len + 1:
        raise ValueError(
            f"split has {tokens.size} tokens, fewer than seq_len + 1 = {seq_len + 1}; "
            "use a shorter seq_len or a larger corpus"
        )
    return tokens


class BatchLoader:
    """Random training batches, deterministic from (seed, rank, world_size), resumable.

    Batch i's start offsets are drawn uniformly from [0, len - seq_len - 1] by a PCG64
    generator seeded with the i-th spawned child of `np.random.SeedSequence([seed, rank])`.
    The stream is therefore a pure function of (seed, rank, i): ranks get different streams,
    and resuming is O(1), with no replay of earlier batches. `state_dict()` holds only ints.
    `world_size` is validated (0 <= rank < world_size) and recorded so that a state is not
    restored into a differently-sharded run. With `answers` (a generated task's distances),
    `next_batch(with_answers=True)` also returns the answer marks of the batch.
    """

    def __init__(
        self,
        tokens: np.ndarray,
        batch_size: int,
        seq_len: int,
        *,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        answers: np.ndarray | None = None,
    ) -> None:
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.seq_len = _check_int("seq_len", seq_len, 1)
        self.seed = _check_int("seed", seed, 0)
        self.world_size = _check_int("world_size", world_size, 1)
        self.rank = _check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be < world_size = {self.world_size}, got {rank}")
        self.tokens = _check_tokens(tokens, self.seq_len)
        self.answers = _check_answers(answers, self.tokens)
        self._root = np.random.SeedSequence([self.seed, self.rank])
        self._offsets = np.arange(self.seq_len + 1)
        self.batches = 0  # batches drawn so far: the only mutable state

    def _starts(self, index: int) -> np.ndarray:
        # Same child as self._root.spawn(index + 1)[index], without spawning the others.
        child = np.random.SeedSequence(self._root.entropy, spawn_key=(*self._root.spawn_key, index))
        rng = np.random.Generator(np.random.PCG64(child))
        return rng.integers(0, self.tokens.size - self.seq_len, size=self.batch_size)

    def next_batch(self, *, with_answers: bool = False) -> tuple[torch.Tensor, ...]:
        """(x, y), each (batch_size, seq_len) int64 on CPU; y is x shifted left by one token.

        `with_answers`: (x, y, a) with the answer marks `a` (module docstring).
        """
        if with_answers and self.answers is None:
            raise ValueError("with_answers=True needs a loader made with answers")
        starts = self._starts(self.batches)
        self.batches += 1
        windows = np.asarray(self.tokens[starts[:, None] + self._offsets], dtype=np.int64)
        x, y = torch.from_numpy(windows[:, :-1].copy()), torch.from_numpy(windows[:, 1:].copy())
        if with_answers:
            return x, y, answer_marks(self.answers, starts, self.seq_len)
        return x, y

    def state_dict(self) -> dict[str, int]:
        """JSON-serialisable state (ints only) that continues the stream bit for bit."""
        return {
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "n_tokens": int(self.tokens.size),
            "batches": self.batches,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state`; `ValueError` if it was made for a different loader setup."""
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"loader state is missing keys {missing}")
        mine = self.state_dict()
        for key in _STATE_KEYS[:-1]:
            if state[key] != mine[key]:
                raise ValueError(
                    f"loader state has {key}={state[key]!r} but this loader has {mine[key]!r}"
                )
        self.batches = _check_int("batches", state["batches"], 0)


def spread_starts(n_tokens: int, seq_len: int, count: int) -> np.ndarray:
    """Up to `count` distinct window offsets (windows of T + 1 tokens) evenly spaced over a
    split of `n_tokens`, first and last included: windows from many files, not one."""
    count = _check_int("count", count, 1)
    last = n_tokens - (seq_len + 1)
    if last < 0:
        raise ValueError(f"the split has {n_tokens} tokens, fewer than T + 1 = {seq_len + 1}")
    return np.unique(np.linspace(0, last, num=count).astype(np.int64))


def windows_at(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> np.ndarray:
    """(len(starts), T + 1) int64: the windows of T + 1 tokens that begin at `starts`."""
    return np.asarray(tokens[starts[:, None] + np.arange(seq_len + 1)], dtype=np.int64)


def spread_windows(tokens: np.ndarray, seq_len: int, count: int) -> torch.Tensor:
    """(count', T + 1) int64 windows at `spread_starts` over the whole split."""
    return torch.from_numpy(windows_at(tokens, spread_starts(tokens.size, seq_len, count), seq_len))


#: where evaluation windows sit in a split: "first" (contiguous from its start: one or a few
#: files of a text corpus) or "spread" (evenly spaced over all of it: many files).
EvalLayout = Literal["first", "spread"]
EVAL_LAYOUTS: tuple[str, ...] = get_args(EvalLayout)


def eval_starts(
    n_tokens: int, seq_len: int, batch_size: int, max_batches: int | None, layout: str = "first"
) -> np.ndarray:
    """Window offsets of the evaluation, in order: `max_batches` batches of `batch_size`
    windows of T + 1 tokens ("first": back to back from the split's start, the trailing
    remainder dropped; "spread": `spread_starts`). Without `max_batches`, every
    non-overlapping window, whatever the layout."""
    if layout not in EVAL_LAYOUTS:
        raise ValueError(f"eval layout must be one of {EVAL_LAYOUTS}, got {layout!r}")
    n_windows = (n_tokens - 1) // seq_len
    wanted = n_windows if max_batches is None else min(n_windows, batch_size * max_batches)
    if layout == "spread" and max_batches is not None and wanted < n_windows:
        return spread_starts(n_tokens, seq_len, wanted)
    return np.arange(wanted, dtype=np.int64) * seq_len


def eval_batches(
    tokens: np.ndarray,
    batch_size: int,
    seq_len: int,
    max_batches: int | None = None,
    *,
    answers: np.ndarray | None = None,
    layout: str = "first",
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Deterministic eval batches of non-overlapping windows at `eval_starts(..., layout)`.

    Window j has x = tokens[s_j : s_j + T] and y = tokens[s_j + 1 : s_j + T + 1], so every
    target is scored at most once. Windows are grouped in order into batches of
    `batch_size`; the last batch may be smaller. Arguments are checked eagerly. With
    `answers` (a generated task's distances), batches are (x, y, a) with answer marks.
    """
    batch_size = _check_int("batch_size", batch_size, 1)
    seq_len = _check_int("seq_len", seq_len, 1)
    if max_batches is not None:
        max_batches = _check_int("max_batches", max_batches, 1)
    tokens = _check_tokens(tokens, seq_len)
    answers = _check_answers(answers, tokens)
    starts = eval_starts(tokens.size, seq_len, batch_size, max_batches, layout)
    return _eval_iter(tokens, batch_size, seq_len, starts, answers)


def _eval_iter(
    tokens: np.ndarray,
    batch_size: int,
    seq_len: int,
    starts: np.ndarray,
    answers: np.ndarray | None,
) -> Iterator[tuple[torch.Tensor, ...]]:
    for first in range(0, starts.size, batch_size):
        chunk = starts[first : first + batch_size]
        windows = windows_at(tokens, chunk, seq_len)
        batch = torch.from_numpy(windows[:, :-1].copy()), torch.from_numpy(windows[:, 1:].copy())
        if answers is not None:
            batch = (*batch, answer_marks(answers, chunk, seq_len))
        yield batch
