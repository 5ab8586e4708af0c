"""The generated tasks by name: `synthetic:recall` and `synthetic:passkey` (each in its own
module, on the shared pieces in `aah.data.synthetic`), and the name of their content."""

from __future__ import annotations

from aah.data.config import DataConfig
from aah.data.passkey import generate_passkey
from aah.data.recall import generate_recall
from aah.data.synthetic import TaskStream


def generate(kind: str, cfg: DataConfig, n_tokens: int, seq_len: int, seed: int) -> TaskStream:
    """The stream of task `kind` ("recall" or "passkey") with the task fields of `cfg`."""
    edges = list(cfg.recall_buckets) or None
    if kind == "recall":
        return generate_recall(
            n_tokens, seq_len, seed, words=cfg.recall_words, n_keys=cfg.recall_keys,
            n_values=cfg.recall_values, edges=edges, fused=cfg.recall_format == "fused",
        )  # fmt: skip
    if kind == "passkey":
        return generate_passkey(n_tokens, seq_len, seed, n_values=cfg.recall_values, edges=edges)
    raise ValueError(f"data.corpus: unknown synthetic task {kind!r}")


def content_key(kind: str, cfg: DataConfig, n_train: int, seq_len: int) -> str:
    """A name for the generated content: every field that changes the bytes."""
    edges = "-".join(map(str, cfg.recall_buckets)) or "pow2"
    return (
        f"synthetic-{kind}-T{seq_len}-n{n_train}-w{cfg.recall_words}-k{cfg.recall_keys}"
        f"-v{cfg.recall_values}-b{edges}-{cfg.recall_format}"
    )
