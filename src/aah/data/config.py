"""`DataConfig`: the TOML section `[data]`, validated field by field."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Corpora known by name; anything else must be `hf:<dataset>[:<config>]`.
NAMED_CORPORA = ("python-stdlib", "shakespeare", "synthetic:recall")


@dataclass
class DataConfig:
    """Where the training text comes from and how it is split and cached.

    corpus:       "python-stdlib" | "shakespeare" | "synthetic:recall" (generated, see
                  aah.data.synthetic) | "hf:<dataset>[:<config>]"; ignored when `path` is set.
    path:         a user text file, or a folder of text files read recursively.
    val_fraction: share of files (chosen by a hash of their relative path) that go to
                  validation, strictly between 0 and 1; a single file is split by bytes.
    max_bytes:    optional cap on total corpus bytes, taken in the stable file order.
    cache_dir:    token cache folder ("~" expanded); the env var AAH_CACHE_DIR overrides it
                  when set and non-empty.
    recall_words: synthetic:recall only: background words between two records (0 = records
                  back to back: the densest supervision).

    `validate()` raises `ValueError` naming the first bad field.
    """

    corpus: str = "python-stdlib"
    path: str | None = None
    val_fraction: float = 0.05
    max_bytes: int | None = None
    cache_dir: str = "~/.cache/aah"
    recall_words: int = 3

    def validate(self) -> None:
        """Raise `ValueError` naming the field if any value is out of its domain."""
        if not isinstance(self.corpus, str):
            raise ValueError(f"data.corpus must be a string, got {self.corpus!r}")
        if self.path is None:
            parse_corpus(self.corpus)  # raises naming data.corpus
        elif not isinstance(self.path, str) or not self.path.strip():
            raise ValueError(f"data.path must be a non-empty string or None, got {self.path!r}")
        vf = self.val_fraction
        if isinstance(vf, bool) or not isinstance(vf, (int, float)):
            raise ValueError(f"data.val_fraction must be a number, got {vf!r}")
        if not math.isfinite(vf) or not 0.0 < vf < 1.0:
            raise ValueError(f"data.val_fraction must be in (0, 1), got {vf!r}")
        mb = self.max_bytes
        if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or mb < 2):
            raise ValueError(f"data.max_bytes must be an int >= 2 or None, got {mb!r}")
        rw = self.recall_words
        if isinstance(rw, bool) or not isinstance(rw, int) or not 0 <= rw <= 64:
            raise ValueError(f"data.recall_words must be an int in [0, 64], got {rw!r}")
        if not isinstance(self.cache_dir, str) or not self.cache_dir.strip():
            raise ValueError(f"data.cache_dir must be a non-empty string, got {self.cache_dir!r}")


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
