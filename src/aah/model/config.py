"""`GPTConfig`: the decoder's shape and options, validated with errors that name the field."""

from __future__ import annotations

import math
from dataclasses import dataclass

POSITIONS = ("rope", "learned", "none", "alibi", "relative")
# Kept equal to aah.attention.variants.VARIANTS (not imported: configs stay torch-free).
ATTENTIONS = (
    "softmax", "additive", "bilinear", "block-sparse", "global-tokens",
    "low-rank", "kernel", "kernel-favor",
)  # fmt: skip
SCORE_BIAS_POSITIONS = ("alibi", "relative")
NO_SCORE_ATTENTIONS = ("low-rank", "kernel", "kernel-favor")
NORMS = ("layernorm", "rmsnorm")
# Kept equal to "auto" + aah.attention.registry.BACKENDS (not imported: configs stay torch-free).
BACKENDS = ("auto", "reference", "dense", "banded", "grouped", "flex", "flash")


@dataclass
class GPTConfig:
    """Shape of a pre-norm byte-level decoder.

    `n_kv_head` < `n_head` gives GQA (1 gives MQA); `max_seq_len` is also the training length.
    `backend` is the `aah.attention.windowed_attention` backend name.
    `attention` names an `aah.attention.variants` variant; `position` "alibi"/"relative" are
    score biases that the attention variant applies inside its windowed computation.
    `norm` "layernorm" (bias-free) is the default because PyTorch runs it as one fused kernel:
    forward+backward at (2, 4096, 256) on one CPU thread took 5.5 ms against 29.5 ms for
    "rmsnorm", whose CPU path is a chain of elementwise ops.
    """

    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 8
    n_kv_head: int = 8
    d_model: int = 256
    d_ff: int = 0  # 0 means 4 * d_model
    max_seq_len: int = 1024
    position: str = "rope"
    rope_base: float = 10000.0
    attention: str = "softmax"
    norm: str = "layernorm"
    dropout: float = 0.0
    backend: str = "auto"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    def validate(self) -> GPTConfig:
        """Raise ValueError naming the first bad field; return self for chaining."""
        for name in ("vocab_size", "n_layer", "n_head", "n_kv_head", "d_model", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"model.{name} must be a positive int, got {value!r}")
        if isinstance(self.d_ff, bool) or not isinstance(self.d_ff, int) or self.d_ff < 0:
            raise ValueError(f"model.d_ff must be an int >= 0 (0 = 4 * d_model), got {self.d_ff!r}")
        if self.d_model % self.n_head:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_head ({self.n_head})"
            )
        if self.n_head % self.n_kv_head:
            raise ValueError(
                f"model.n_kv_head ({self.n_kv_head}) must divide model.n_head ({self.n_head})"
            )
        if self.position not in POSITIONS:
            raise ValueError(f"model.position must be one of {POSITIONS}, got {self.position!r}")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"model.position 'rope' needs an even head dim, got {self.head_dim}")
        if not (isinstance(self.rope_base, (int, float)) and 1.0 < self.rope_base < math.inf):
            raise ValueError(f"model.rope_base must be a finite number > 1, got {self.rope_base!r}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"model.attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.position in SCORE_BIAS_POSITIONS and self.attention in NO_SCORE_ATTENTIONS:
            raise ValueError(
                f"model.position {self.position!r} is a score bias; model.attention "
                f"{self.attention!r} has no explicit scores (use rope, learned or none)"
            )
        if self.norm not in NORMS:
            raise ValueError(f"model.norm must be one of {NORMS}, got {self.norm!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"model.backend must be one of {BACKENDS}, got {self.backend!r}")
        return self
