"""`make_variant`: one factory from a name (and a position scheme) to an attention module.

A model needs exactly one call: `make_variant(config.attention, n_head=..., n_kv_head=...,
head_dim=..., max_seq_len=..., position=config.position, backend=config.backend)`, then
`module(q, k, v, windows)` where it used `windowed_attention(q, k, v, windows)`.
"""

from __future__ import annotations

from typing import get_args

from aah.attention.variants.base import Variant
from aah.attention.variants.connectivity import BlockSparseAttention, GlobalTokensAttention
from aah.attention.variants.kernel import KernelAttention
from aah.attention.variants.lowrank import LowRankAttention
from aah.attention.variants.score_bias import POSITIONS, make_score_bias
from aah.attention.variants.scores import AdditiveAttention, BilinearAttention, SoftmaxAttention
from aah.choices import ApproximationVariant, Attention, ConnectivityVariant, ScoreVariant

#: Variant names by kind. Sliding windows are not a name: every variant takes a plan, and
#: "softmax" with a plan is the engine itself.
KINDS: dict[str, tuple[str, ...]] = {
    "scores": get_args(ScoreVariant),
    "connectivity": get_args(ConnectivityVariant),
    "approximations": get_args(ApproximationVariant),
    "positions": POSITIONS,
    "kv_sharing": ("mha", "gqa", "mqa"),
}

VARIANTS: tuple[str, ...] = get_args(Attention)

#: Variants without explicit scores cannot add a distance bias.
_NO_BIAS = KINDS["approximations"]


def available() -> dict[str, tuple[str, ...]]:
    """Names by kind: scores, connectivity, approximations (buildable by `make_variant`),
    positions (the `position` argument) and kv_sharing (set through `n_kv_head`)."""
    return dict(KINDS)


def kv_sharing(n_head: int, n_kv_head: int) -> str:
    """ "mha" (Hkv = Hq), "mqa" (Hkv = 1) or "gqa" (in between)."""
    if n_kv_head == n_head:
        return "mha"
    return "mqa" if n_kv_head == 1 else "gqa"


def make_variant(
    name: str,
    *,
    n_head: int,
    n_kv_head: int,
    head_dim: int,
    max_seq_len: int,
    position: str = "none",
    backend: str = "auto",
    **options: object,
) -> Variant:
    """Build variant `name` for Hq = n_head, Hkv = n_kv_head, D = head_dim.

    `position` "alibi" / "relative" attaches a score bias (options `alibi_slopes`,
    `num_buckets`, `max_distance`); "rope" / "learned" / "none" act outside attention.
    Other options go to the variant (e.g. block, local_blocks, stride, n_global, segment,
    rank, n_features, seed, chunk, hidden). Raises ValueError naming a bad name or option.
    """
    if name not in VARIANTS:
        raise ValueError(f"unknown attention variant {name!r}; choose one of {VARIANTS}")
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
    bias_keys = ("alibi_slopes", "num_buckets", "max_distance")
    bias_opts = {k: options.pop(k) for k in bias_keys if k in options}
    bias = make_score_bias(position, n_head, **bias_opts)
    if bias is not None and name in _NO_BIAS:
        raise ValueError(
            f"attention variant {name!r} has no explicit scores, so position {position!r} "
            "(a score bias) cannot apply; use rope, learned or none"
        )
    dims = (n_head, n_kv_head, head_dim)
    try:
        if name == "softmax":
            return SoftmaxAttention(*dims, bias=bias, backend=backend, **options)  # type: ignore[arg-type]
        if name == "bilinear":
            return BilinearAttention(*dims, bias=bias, backend=backend, **options)
        if name == "additive":
            return AdditiveAttention(*dims, bias=bias, **options)  # type: ignore[arg-type]
        if name == "block-sparse":
            return BlockSparseAttention(*dims, bias=bias, **options)  # type: ignore[arg-type]
        if name == "global-tokens":
            return GlobalTokensAttention(*dims, bias=bias, **options)  # type: ignore[arg-type]
        if name == "low-rank":
            return LowRankAttention(*dims, **options)  # type: ignore[arg-type]
        feature_map = "elu" if name == "kernel" else "favor"
        return KernelAttention(*dims, feature_map=feature_map, **options)  # type: ignore[arg-type]
    except TypeError as err:  # an option the variant does not take
        raise ValueError(f"attention variant {name!r}: bad option ({err})") from None
