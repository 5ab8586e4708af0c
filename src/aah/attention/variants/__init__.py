"""Attention variants around per-head windows, behind one factory and one module contract:
`make_variant(name, n_head=, n_kv_head=, head_dim=, max_seq_len=, position=, **options)`
returns a module with `forward(q, k, v, windows) -> out` and `supports_windows`.

How each composes (windows: a per-head plan; GQA: n_kv_head < n_head; positions: rope /
learned / none act outside attention and compose with all; alibi / relative are score biases):

| variant        | windows                      | GQA/MQA | alibi / relative         |
|----------------|------------------------------|---------|--------------------------|
| softmax        | exact (the engine)           | yes     | exact, banded per bucket |
| bilinear       | exact ((q W) k^T + engine)   | yes     | exact, banded per bucket |
| additive       | exact (explicit mask)        | yes     | exact (added to scores)  |
| block-sparse   | intersected with the pattern | yes     | exact                    |
| global-tokens  | window keys ∪ global keys    | yes     | exact                    |
| low-rank       | ValueError if any w < T      | yes     | ValueError (no scores)   |
| kernel(-favor) | ValueError if any w < T      | yes     | ValueError (no scores)   |
"""

from aah.attention.variants.base import Variant
from aah.attention.variants.factory import VARIANTS, available, kv_sharing, make_variant
from aah.attention.variants.score_bias import ALiBi, RelativeBias, make_score_bias

__all__ = [
    "VARIANTS",
    "ALiBi",
    "RelativeBias",
    "Variant",
    "available",
    "kv_sharing",
    "make_score_bias",
    "make_variant",
]
