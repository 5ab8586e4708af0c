"""How much a window changes what a head writes to the residual stream, from sampled rows.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D), query head h reads KV head h // (Hq // Hkv);
w_o (E, Hq * D), the layer's output projection (nn.Linear layout: out x in). For a sampled
query at position i, the full causal row gives o = sum_j p_ij v_j; a window w with s sinks keeps
the keys i - w < j <= i and j < s and renormalises over them, o_w = sum_kept p_ij v_j /
sum_kept p_ij (what windowed attention computes). The head's contribution to the residual
stream moves by W_o,h (o - o_w); `output_error` is its squared norm, averaged over rows.

Why not attention mass: a head that spreads its attention evenly over far tokens whose values
are alike (an averaging head) loses much mass but little output when cut, and a head whose
output projection is small matters little whatever it attends to. Mass counts both as large.
On SmolLM2-135M at T = 2048 and KV 0.3 the mass plan lost to one uniform window with sinks,
and the plan allocated on this error beat it (docs/pretrained.md).

Cost per call O(Hq * S * T * (D + n_windows)) plus O(Hq * S * n_windows * D * E) for the
projection; no T x T tensor.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from aah.validate import check_int


def output_error(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w_o: torch.Tensor,
    candidates: Sequence[int],
    sinks: int = 0,
    *,
    sample_queries: int = 64,
    seed: int = 0,
    scale: float | None = None,
    rows: Sequence[int] | None = None,
    own_window: int | None = None,
) -> torch.Tensor:
    """(Hq, n_windows) float64 on CPU: mean || W_o,h (o - o_w) ||^2 (module docstring) over
    `sample_queries` seeded positions per sequence, drawn from 1..T-1 (all of them when fewer),
    or over the given `rows` (positions in 1..T-1, the same for every sequence of the batch:
    e.g. the rows that predict an answer).

    `own_window`: the layer's own sliding window S, if it has one. The model then never
    computes the full causal row: o is its S-window row, a candidate w >= S changes nothing
    (0), and a shorter one keeps its sinks (the rule of `attention.kv_bytes.layer_sinks`).
    Against the full row, a sliding layer's own attention would be priced as a cut."""
    check_int("sinks", sinks, minimum=0)
    check_int("sample_queries", sample_queries, minimum=1)
    batch, n_q, seq_len, dim = q.shape
    if rows is not None:
        rows = sorted({int(r) for r in rows})
        if not rows or rows[0] < 1 or rows[-1] >= seq_len:
            raise ValueError(f"rows must be a non-empty set of positions in 1..{seq_len - 1}, "
                             f"got {rows}")  # fmt: skip
    n_kv = k.shape[1]
    if n_q % n_kv or w_o.shape[-1] != n_q * dim:
        raise ValueError(
            f"{n_q} query heads of dim {dim} do not fit {n_kv} KV heads and an output "
            f"projection of {tuple(w_o.shape)}"
        )
    scale = dim**-0.5 if scale is None else scale
    gen = torch.Generator().manual_seed(seed)
    proj = w_o.detach().float().view(-1, n_q, dim)  # (E, Hq, D)
    total = torch.zeros(n_q, len(candidates), dtype=torch.float64)
    if seq_len < 2:  # row 0 sees only itself, which every window keeps: nothing moves
        return total
    for sampled in sampled_rows(q, k, v, sample_queries, gen, scale, rows):
        own = sampled.full if own_window is None else sampled.windowed(own_window, 0)
        for c, w in enumerate(candidates):
            if own_window is not None and w >= own_window:
                continue  # the layer's own attention: nothing moves
            moved = torch.einsum("hsd,ehd->hse", own - sampled.windowed(w, sinks), proj)
            total[:, c] += moved.pow(2).sum(-1).mean(-1).double().cpu()
    return total / batch


@dataclass(frozen=True)
class SampledRows:
    """One sequence's sampled query rows under full causal attention (query heads first)."""

    pos: torch.Tensor  # (S,) the rows, sorted, from 1..T-1
    probs: torch.Tensor  # (Hq, S, T) their causal attention
    values: torch.Tensor  # (Hq, T, D) each query head's values
    distance: torch.Tensor  # (S, T) row minus key position
    full: torch.Tensor  # (Hq, S, D) the full rows' outputs

    def windowed(self, window: int, sinks: int) -> torch.Tensor:
        """(Hq, S, D): the rows' outputs with only the keys i - w < j <= i and j < sinks,
        renormalised over them (what windowed attention computes)."""
        keys = torch.arange(self.distance.shape[1], device=self.distance.device)
        kept = self.probs * ((self.distance < int(window)) | (keys.view(1, -1) < sinks))
        return (kept @ self.values) / kept.sum(-1, keepdim=True).clamp_min(1e-30)


def sampled_rows(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sample_queries: int,
    gen: torch.Generator, scale: float, rows: Sequence[int] | None = None,
) -> Iterator[SampledRows]:  # fmt: skip
    """Per sequence of the batch, `sample_queries` rows drawn from 1..T-1 with `gen` (all of
    them when fewer), or the given sorted `rows`, in float32 without gradients; query head h
    reads KV head h // G."""
    seq_len, group = q.shape[2], q.shape[1] // k.shape[1]
    keys = torch.arange(seq_len, device=q.device)
    with torch.no_grad():
        for b in range(q.shape[0]):
            if rows is None:
                pos = torch.randperm(seq_len - 1, generator=gen)[:sample_queries].add_(1)
                pos = pos.sort().values.to(q.device)
            else:
                pos = torch.tensor(rows, device=q.device)
            qs = q[b, :, pos].float() * scale  # (Hq, S, D)
            kk = k[b].float().repeat_interleave(group, 0)  # (Hq, T, D)
            vv = v[b].float().repeat_interleave(group, 0)
            dist = pos.view(-1, 1) - keys.view(1, -1)  # (S, T)
            scores = (qs @ kk.transpose(1, 2)).masked_fill(dist < 0, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            yield SampledRows(pos, probs, vv, dist, probs @ vv)


def output_projection(module: torch.nn.Module) -> torch.Tensor:
    """The attention module's output projection as (E, Hq * D): `o_proj` (Llama, Mistral, Qwen;
    with a healed LoRA update added where one is installed) or GPT-2's `c_proj` (a Conv1D,
    stored transposed)."""
    if hasattr(module, "o_proj"):
        projection = module.o_proj
        weight = projection.weight
        # A healed LoRA around it (peft) changes what the head writes: count its update too.
        delta = getattr(projection, "get_delta_weight", None)
        if callable(delta):
            for adapter in projection.active_adapters:
                weight = weight + delta(adapter)
        return weight
    if hasattr(module, "c_proj"):
        return module.c_proj.weight.t()
    raise ValueError(f"{type(module).__name__} has no o_proj or c_proj output projection")
