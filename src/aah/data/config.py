"""`DataConfig`: the TOML section `[data]`, validated field by field."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal, get_args

from aah.validate import check_choice, check_int, is_int, is_real

#: how synthetic:recall writes a value (see `DataConfig.recall_format`).
RecallFormat = Literal["fused", "pair"]
RECALL_FORMATS: tuple[str, ...] = get_args(RecallFormat)
#: Corpora known by name; anything else must be `hf:<dataset>[:<config>]`.
NAMED_CORPORA = ("python-stdlib", "shakespeare", "synthetic:recall", "synthetic:passkey")


@dataclass
class DataConfig:
    """Where the training text comes from and how it is split and cached.

    corpus:       "python-stdlib" | "shakespeare" | "synthetic:recall" | "synthetic:passkey"
                  (generated tasks, see aah.data.synthetic) | "hf:<dataset>[:<config>]";
                  ignored when `path` is set.
    path:         a user text file, or a folder of text files read recursively.
    val_fraction: share of files (chosen by a hash of their relative path) that go to
                  validation, strictly between 0 and 1; a single file is split by bytes.
    max_bytes:    optional cap on total corpus bytes, taken in the stable file order.
    cache_dir:    token cache folder ("~" expanded); the env var AAH_CACHE_DIR overrides it
                  when set and non-empty.
    recall_words: synthetic:recall: background words before each record (0 = records back
                  to back: the densest supervision, no local structure).
    recall_keys:  synthetic:recall: key alphabet size (2-26, `A`...); at most this many
                  bindings are live within a window; "fused" needs keys x values <= 128.
    recall_values: synthetic tasks: value alphabet size (2-10, `0`...); chance accuracy is
                  1 / recall_values.
    recall_buckets: synthetic tasks: distance bucket edges, strictly increasing, the last at
                  most the sequence length; [] = powers of two from 4 up to the sequence length.
    recall_format: synthetic:recall: "fused" (a value byte >= 128 names its key: one
                  attention hop answers, learned within minutes on a CPU) or "pair" (a digit:
                  needs an induction circuit, which forms much later at small scale).

    `validate()` raises `ValueError` naming the first bad field.
    """

    corpus: str = "python-stdlib"
    path: str | None = None
    val_fraction: float = 0.05
    max_bytes: int | None = None
    cache_dir: str = "~/.cache/aah"
    recall_words: int = 1
    recall_keys: int = 16
    recall_values: int = 8
    recall_buckets: list[int] = field(default_factory=list)
    recall_format: RecallFormat = "fused"

    def validate(self) -> None:
        """Raise `ValueError` naming the field if any value is out of its domain."""
        if not isinstance(self.corpus, str):
            raise ValueError(f"data.corpus must be a string, got {self.corpus!r}")
        if self.path is None:
            parse_corpus(self.corpus)  # raises naming data.corpus
        elif not isinstance(self.path, str) or not self.path.strip():
            raise ValueError(f"data.path must be a non-empty string or None, got {self.path!r}")
        vf = self.val_fraction
        if not is_real(vf) or not 0.0 < vf < 1.0:
            raise ValueError(f"data.val_fraction must be a finite number in (0, 1), got {vf!r}")
        if self.max_bytes is not None:
            check_int("data.max_bytes (or none)", self.max_bytes, 2)
        check_int("data.recall_words", self.recall_words, 0, 64)
        check_int("data.recall_keys", self.recall_keys, 2, 26)
        check_int("data.recall_values", self.recall_values, 2, 10)
        _check_edges(self.recall_buckets)
        check_choice("data.recall_format", self.recall_format, RecallFormat)
        if self.recall_format == "fused" and self.recall_keys * self.recall_values > 128:
            raise ValueError(
                "data.recall_keys x data.recall_values must be <= 128 for data.recall_format "
                f"'fused' (one byte >= 128 per pair), got {self.recall_keys * self.recall_values}"
            )
        if not isinstance(self.cache_dir, str) or not self.cache_dir.strip():
            raise ValueError(f"data.cache_dir must be a non-empty string, got {self.cache_dir!r}")


def _check_edges(edges: object) -> None:
    ok = isinstance(edges, (list, tuple)) and all(is_int(e) for e in edges)
    if ok and edges:
        ok = len(edges) >= 2 and edges[0] >= 2 and all(a < b for a, b in pairwise(edges))
    if not ok:
        raise ValueError(
            "data.recall_buckets must be [] or >= 2 strictly increasing ints >= 2 "
            f"(bucket edges), got {edges!r}"
        )


def parse_corpus(corpus: str) -> tuple[str, str | None, str | None]:
    """Split a corpus spec into (kind, hf_dataset, hf_config); `ValueError` names data.corpus.

    kind is one of NAMED_CORPORA or "hf"; the dataset and config are only set for "hf".
    """
    if corpus in NAMED_CORPORA:
        return corpus, None, None
    if corpus.startswith("hf:"):
        parts = corpus[3:].split(":")
        if len(parts) in (1, 2) and all(p.strip() for p in parts):
            return "hf", parts[0], parts[1] if len(parts) == 2 else None
    raise ValueError(
        f"data.corpus must be one of {', '.join(NAMED_CORPORA)} or 'hf:<dataset>[:<config>]', "
        f"got {corpus!r}"
    )
