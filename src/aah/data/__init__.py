"""Byte-level text data, offline: corpora, split, token cache, training and eval batches."""

from aah.data.config import DataConfig
from aah.data.dataset import TokenSplits, load_tokens
from aah.data.loader import BatchLoader, eval_batches
from aah.data.tokenizer import ByteTokenizer

__all__ = [
    "BatchLoader",
    "ByteTokenizer",
    "DataConfig",
    "TokenSplits",
    "eval_batches",
    "load_tokens",
]
