"""A text given to score (`aah eval --data FILE|DIR`): every file read whole, no split.

A folder's files are joined in their stable order with the split's separator, as training
joins documents, so a folder scores like one stream of all its files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aah.data.config import DataConfig
from aah.data.corpora import read_corpus
from aah.data.split import join_pieces


@dataclass(frozen=True)
class GivenText:
    tokens: np.ndarray  # uint8 byte tokens of every file
    name: str  # the path as given
    n_files: int
    n_skipped: int  # binary files skipped inside a folder


def read_given(path: str) -> GivenText:
    """The tokens of a file or folder; ValueError naming the path if it holds no text."""
    corpus = read_corpus(DataConfig(path=path))
    tokens = join_pieces([doc.data for doc in corpus.documents])
    return GivenText(tokens, corpus.name, len(corpus.documents), corpus.n_skipped_binary)
