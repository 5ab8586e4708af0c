"""`load_tokens`: corpus -> split -> cached uint8 token arrays, memory-mapped."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aah.data import token_cache
from aah.data.config import DataConfig
from aah.data.corpora import read_corpus
from aah.data.split import SplitPlan, join_pieces, plan_split


@dataclass(frozen=True)
class TokenSplits:
    """Token ids (bytes) of the train and validation splits of one corpus.

    train, val:       read-only uint8 `np.memmap`s from the cache, each non-empty.
    name:             the corpus name ("python-stdlib", "shakespeare", "hf:...") or the path.
    content_hash:     hex key of the exact content and split settings (the cache folder name).
    n_files_train/_val: documents in each split (a single-file corpus counts 1 in each).
    n_files_skipped:  binary files skipped inside a folder (a warning says so too).
    train_answer_distance, val_answer_distance: for synthetic tasks, int32 arrays as long as
                  the split: d > 0 marks an answer byte whose source is d bytes earlier
                  (aah.data.synthetic); None for text corpora.
    answer_buckets: for synthetic tasks, the [lo, hi) distance buckets accuracy is reported in.
    """

    train: np.ndarray
    val: np.ndarray
    name: str
    content_hash: str
    n_files_train: int
    n_files_val: int
    n_files_skipped: int = 0
    train_answer_distance: np.ndarray | None = None
    val_answer_distance: np.ndarray | None = None
    answer_buckets: tuple[tuple[int, int], ...] | None = None


def load_tokens(
    cfg: DataConfig, *, progress: bool = False, seq_len: int | None = None
) -> TokenSplits:
    """Read, split and tokenize the corpus of `cfg`, through the on-disk cache.

    The corpus is always read (its content is the cache key); the split, encoding and writing
    happen only on a cache miss. `progress` shows a tqdm bar while reading files. Raises
    `ValueError` for bad config values and unusable inputs (see `aah.data.corpora`); the split
    rule is in `aah.data.split`, the cache layout in `aah.data.token_cache`. `synthetic:*` tasks are
    generated instead (no cache) and need `seq_len`, which sets their distance buckets.
    """
    cfg.validate()
    if cfg.path is None and cfg.corpus.startswith("synthetic:"):
        return _synthetic_splits(cfg, seq_len)
    corpus = read_corpus(cfg, progress=progress)
    key = token_cache.content_hash(corpus.documents, cfg.val_fraction, cfg.max_bytes)
    entry = token_cache.cache_root(cfg) / key
    hit = token_cache.load_entry(entry, key)
    if hit is None:
        plan = plan_split(corpus.documents, cfg.val_fraction)
        train, val = encode_split(plan)
        meta = {
            "n_files_train": plan.n_files_train,
            "n_files_val": plan.n_files_val,
            "val_fraction": cfg.val_fraction,
            "max_bytes": cfg.max_bytes,
        }
        token_cache.store_entry(entry, key, train, val, meta)
        hit = token_cache.load_entry(entry, key)
        if hit is None:  # only if the cache folder is being tampered with concurrently
            raise RuntimeError(f"token cache entry unreadable right after writing: {entry}")
    train_mm, val_mm, meta = hit
    return TokenSplits(
        train=train_mm,
        val=val_mm,
        name=corpus.name,
        content_hash=key,
        n_files_train=int(meta["n_files_train"]),
        n_files_val=int(meta["n_files_val"]),
        n_files_skipped=corpus.n_skipped_binary,
    )


def encode_split(plan: SplitPlan) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) uint8 token arrays of a split plan; the step a cache hit skips."""
    return join_pieces(plan.train), join_pieces(plan.val)


def _synthetic_splits(cfg: DataConfig, seq_len: int | None) -> TokenSplits:
    """Train and validation streams of a generated task from two fixed seeds: validation is
    the same bytes for every run and seed of one config and sequence length."""
    from aah.data import synthetic, tasks

    kind = cfg.corpus.split(":", 1)[1]
    if seq_len is None:
        raise ValueError(f"data.corpus {cfg.corpus} needs the model's sequence length")
    n_train = cfg.max_bytes or synthetic.TRAIN_BYTES
    train = tasks.generate(kind, cfg, n_train, seq_len, synthetic.TASK_SEED + 1)
    val = tasks.generate(kind, cfg, synthetic.VAL_BYTES, seq_len, synthetic.TASK_SEED + 2)
    return TokenSplits(
        train=train.tokens,
        val=val.tokens,
        name=cfg.corpus,
        content_hash=tasks.content_key(kind, cfg, n_train, seq_len),
        n_files_train=1,
        n_files_val=1,
        train_answer_distance=train.answer_distance,
        val_answer_distance=val.answer_distance,
        answer_buckets=tuple(synthetic.distance_buckets(seq_len, list(cfg.recall_buckets))),
    )
