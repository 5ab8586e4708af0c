"""Reference lines for a suite: unigram and bigram bits/byte of the exact validation bytes
the suite's cells are scored on.

A model that scores near the bigram line uses almost no context; a window policy cannot
matter to it. Both models are fitted to the training split of the same corpus:
unigram with add-one smoothing, bigram P(b | a) = (c(a, b) + P_uni(b)) / (c(a) + 1)
(a one-count prior toward the unigram). The scored targets are those of the training
loop's evaluation (`aah.data.loader.eval_starts`: `train.eval_batches` batches of
`train.batch_size` windows of T, laid out by `train.eval_layout`); each target's previous
byte is inside its window, so the bigram sees no more than the model does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from aah.data import load_tokens
from aah.data.loader import eval_starts, windows_at
from aah.training.run_config import RunConfig

VOCAB = 256


@dataclass(frozen=True)
class Baselines:
    """Bits/byte of the reference models on `n_targets` validation targets."""

    unigram_bpb: float
    bigram_bpb: float
    n_targets: int


def scored_pairs(
    val: np.ndarray, seq_len: int, batch_size: int, batches: int, layout: str = "first"
) -> np.ndarray:
    """(N, 2) (previous byte, target) of the evaluation's targets, in order."""
    windows = windows_at(val, eval_starts(val.size, seq_len, batch_size, batches, layout), seq_len)
    return np.stack([windows[:, :-1].reshape(-1), windows[:, 1:].reshape(-1)], axis=1)


def fit_and_score(train: np.ndarray, pairs: np.ndarray) -> Baselines:
    """Fit both models to `train` (byte ids) and score the (previous, target) `pairs`."""
    tokens = np.asarray(train, dtype=np.int64)
    unigram = np.bincount(tokens, minlength=VOCAB).astype(np.float64) + 1.0
    unigram /= unigram.sum()
    pairs_seen = tokens[:-1] * VOCAB + tokens[1:]
    counts = np.bincount(pairs_seen, minlength=VOCAB * VOCAB).reshape(VOCAB, VOCAB).astype(float)
    bigram = (counts + unigram[None, :]) / (counts.sum(axis=1, keepdims=True) + 1.0)
    prev, target = pairs[:, 0], pairs[:, 1]
    return Baselines(
        unigram_bpb=float(-np.log2(unigram[target]).mean()),
        bigram_bpb=float(-np.log2(bigram[prev, target]).mean()),
        n_targets=int(pairs.shape[0]),
    )


def suite_baselines(config: dict[str, Any]) -> Baselines | str:
    """The reference lines for a suite's cell config (the parsed config.toml), or the reason
    they cannot be computed (a note for the report)."""
    try:
        run = RunConfig.from_dict(config, source="suite cell config.toml")
        splits = load_tokens(run.data, seq_len=run.seq_len)
    except (ValueError, OSError) as err:
        return f"the suite's corpus could not be read ({err})"
    train = run.train
    pairs = scored_pairs(
        splits.val, run.seq_len, train.batch_size, train.eval_batches, train.eval_layout
    )
    if pairs.shape[0] == 0:
        return "the validation split is shorter than one window"
    return fit_and_score(splits.train, pairs)


def baseline_lines(base: Baselines | str) -> list[str]:
    """The report's paragraph on the reference lines."""
    if isinstance(base, str):
        return [f"Reference lines skipped: {base}.", ""]
    if not math.isfinite(base.bigram_bpb):
        return ["Reference lines skipped: not finite.", ""]
    return [
        f"Reference lines on the same {base.n_targets:,} validation bytes: a unigram model "
        f"scores {base.unigram_bpb:.3f} bits/byte and a bigram model {base.bigram_bpb:.3f} "
        "(both fitted to the training split). A model near the bigram line uses little "
        "context, and window policies cannot matter much to it.",
        "",
    ]
