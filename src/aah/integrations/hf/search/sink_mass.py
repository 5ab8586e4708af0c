"""Attention mass beyond each candidate window *given* attention sinks, from sampled exact rows.

Shapes: q (B, Hq, T, D); k (B, Hkv, T, D), Hq % Hkv == 0, query head h reads KV head
h // (Hq // Hkv). A head with window w and s sinks keeps, for the query at position i, the keys
i - w < j <= i and the keys j < s. What it loses is the full causal row's attention on the keys
it keeps neither way: s <= j <= i - w. `mass_beyond_given_sinks` averages that share over
sampled rows, per query head and candidate; with s = 0 it is `controller.mass.mass_beyond`.

Cost per call O(Hq * sample_queries * T * D) and no T x T tensor: the sampled rows go in chunks,
each against the keys up to its last position.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aah.controller.mass import mass_beyond
from aah.validate import check_int


def mass_beyond_given_sinks(
    q: torch.Tensor,
    k: torch.Tensor,
    candidates: Sequence[int],
    sinks: int,
    *,
    sample_queries: int = 64,
    seed: int = 0,
    positions: torch.Tensor | None = None,
    scale: float | None = None,
    chunks: int = 4,
) -> torch.Tensor:
    """(Hq, n_windows) float32 on CPU: the mean share of each sampled full causal row on keys
    s <= j <= i - w (module docstring). `positions` (S,) replace the seeded sample; `scale`
    defaults to 1 / sqrt(D)."""
    check_int("sinks", sinks, minimum=0)
    return mass_beyond(
        q, k, k, candidates, sample_queries=sample_queries, seed=seed, positions=positions,
        scale=scale, chunks=chunks, sinks=sinks,
    ).float()  # fmt: skip
