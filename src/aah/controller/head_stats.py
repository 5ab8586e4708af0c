"""AAH-v3 head features as the method defines them, computed without any T x T matrix.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D) with Hq % Hkv == 0; query head h reads KV head
h // (Hq // Hkv). Feature row (`BASE_FEATURES` order), 9 per head or group:

  0-5  mean |x| and std (with Bessel's correction) of q, k and v over (batch, time, head_dim)
       and, for a group, over its heads too (pooled, not averaged);
  6    entropy of each attention row over log T (every row, whatever its window), averaged
       over batch and rows; rows use the head's window in force;
  7    L2 norm of the head's attention output, averaged over batch and rows;
  8    usage: the attention weight on the last key, averaged over batch and ALL rows (only the
       last row sees that key, so this is p(last row -> itself) / T).

Features 6-8 describe the previous forward's attention; a group's are the mean of its heads'.
`attention_stats` gets them exactly in one windowed pass of the fused attention kernel per
window (cost ~ T (w + b) per head, as a forward of the banded backend; half that when the
forward's own attention output is passed in, as the training loop does), or from `rows`
sampled rows as a cheaper estimate (the same fused pass over those rows alone, in chunks of
nearby rows: cost ~ S (w + ROW_SPAN) per head for S rows). The entropy is computed as
lse - E_p[score], which leaves out the method's 1e-9 inside the log (at most T * 1e-9 per
row); in float32 the difference of two numbers of the size of the scores also costs up to
~1e-8 x max |score| (1e-6 at scores of 100; more only for degenerate scales).
Option `usage="look-back"`: the share of the reachable context a row uses,
sum_j p_ij (i - j) / max(n_i - 1, 1), averaged over rows (n_i = keys row i may see).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from aah.attention.band_layout import forward_with_lse
from aah.attention.masks import window_allows
from aah.attention.sdpa_lse import attention_with_lse
from aah.controller.clustering import Groups
from aah.controller.config import Usage
from aah.validate import check_choice

BASE_FEATURES: tuple[str, ...] = (
    "q_abs",
    "q_std",
    "k_abs",
    "k_std",
    "v_abs",
    "v_std",
    "entropy",
    "out_norm",
    "usage",
)
N_BASE = len(BASE_FEATURES)
#: Sampled rows go through the fused kernel in chunks of rows within one span of this many
#: positions: a chunk reads its rows' windows of keys (causal and windowed), not all of them.
ROW_SPAN = 256


def _heads(x: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """x[:, idx] in float32; a view, not a copy, when idx is a run of consecutive heads."""
    if idx == list(range(idx[0], idx[0] + len(idx))):
        return x[:, idx[0] : idx[0] + len(idx)].float()
    return x[:, idx].float()


def _kv_index(n_q: int, n_kv: int, heads: Sequence[int]) -> list[int]:
    group = n_q // n_kv
    return [h // group for h in heads]


def _mean_abs_std(x: torch.Tensor, dims: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.float()
    return x.abs().mean(dim=dims), x.std(dim=dims)


def qkv_head_stats(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(Hq, 6): mean |x| and std of q, k, v per head (k/v: the head's KV head)."""
    group = q.shape[1] // k.shape[1]
    cols = list(_mean_abs_std(q, (0, 2, 3)))
    for x in (k, v):
        cols += [c.repeat_interleave(group) for c in _mean_abs_std(x, (0, 2, 3))]
    return torch.stack(cols, dim=-1)


def qkv_group_stats(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: Groups
) -> torch.Tensor:
    """(G, 6): the same statistics pooled over each group's heads."""
    rows = []
    for heads in groups:
        kv = _kv_index(q.shape[1], k.shape[1], heads)
        cols = []
        for x, idx in ((q, heads), (k, kv), (v, kv)):
            cols += list(_mean_abs_std(x[:, idx], (0, 1, 2, 3)))
        rows.append(torch.stack(cols))
    return torch.stack(rows)


def head_features(qkv: torch.Tensor, attn: torch.Tensor | None) -> torch.Tensor:
    """(H, 9) from (H, 6) Q/K/V statistics and (H, 3) attention statistics (None: zeros)."""
    if attn is None:
        attn = torch.zeros(qkv.shape[0], 3)
    return torch.cat([qkv.float(), attn.float()], dim=-1)


def group_features(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: Groups, attn: torch.Tensor | None
) -> torch.Tensor:
    """(G, 9): pooled Q/K/V statistics and the mean attention statistics of each group's heads."""
    if attn is None:
        attn = torch.zeros(q.shape[1], 3)
    attn = attn.float()
    mean_attn = torch.stack([attn[torch.tensor(g)].mean(dim=0) for g in groups])
    return torch.cat([qkv_group_stats(q, k, v, groups), mean_attn], dim=-1)


def sample_rows(seq_len: int, n_rows: int, seed: int) -> torch.Tensor:
    """(S,) sorted distinct query positions, S = min(T, n_rows), fixed by `seed`."""
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randperm(seq_len, generator=gen)[: min(seq_len, n_rows)].sort().values


def attention_stats(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    *,
    rows: torch.Tensor | None = None,
    usage: Usage = "last-key",
    scale: float | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """(Hq, 3) float32: entropy / log T, output norm, usage (module docstring).

    `windows` is the window in force per query head (w >= T: full causal). `rows`, sorted
    distinct positions, turns the exact pass over every row into an estimate from those rows.
    `out` (B, Hq, T, D), the attention output the forward already computed under `windows`,
    halves the pass (exact or over `rows`): the norms come from it, and the pass carries the
    keys only (and the key positions, for look-back usage).
    """
    check_choice("usage", usage, Usage)
    batch, n_q, seq_len, dim = q.shape
    if len(windows) != n_q:
        raise ValueError(f"expected one window per query head ({n_q}), got {len(windows)}")
    if out is not None and out.shape != q.shape:
        raise ValueError(f"out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    scale = dim**-0.5 if scale is None else scale
    pos = torch.arange(seq_len) if rows is None else rows.cpu()
    stats = torch.zeros(n_q, 3, dtype=torch.float64)
    buckets: dict[int, list[int]] = {}
    for h, w in enumerate(windows):
        buckets.setdefault(min(int(w), seq_len), []).append(h)
    with torch.no_grad():
        for w, heads in buckets.items():
            kv = _kv_index(n_q, k.shape[1], heads)
            qh, kh = _heads(q, heads), _heads(k, kv)
            given = None if out is None else _heads(out, heads)
            fused = _fused_inputs(qh, kh, _heads(v, kv) if given is None else None, usage)
            if rows is None:
                every_row = torch.arange(seq_len, device=q.device)
                if w >= seq_len:
                    pv_pk, lse = attention_with_lse(*fused.inputs, scale, causal=True)
                else:
                    pv_pk, lse = forward_with_lse(*fused.inputs, (w,) * len(heads), scale)
                sums = _sums(qh, fused, pv_pk, lse, every_row, w, scale, given)
            else:
                sums = torch.zeros(len(heads), 3, dtype=torch.float64)
                for block in (pos // ROW_SPAN).unique():
                    chunk = pos[pos // ROW_SPAN == block].to(q.device)
                    norms = None if given is None else given[:, :, chunk]
                    pv_pk, lse = _masked_rows(fused, chunk, w, scale)
                    sums += _sums(qh[:, :, chunk], fused, pv_pk, lse, chunk, w, scale, norms)
            stats[heads] = sums / (batch * pos.numel())
            if usage == "last-key":
                stats[heads, 2] = _last_key(qh, kh, w, scale).double() / (batch * seq_len)
    stats[:, 0] /= max(1.0, math.log(seq_len))
    return stats.float()


class _Fused(NamedTuple):
    """Inputs of one fused-kernel pass whose values are [(v |) k (| key position)], so that its
    output gives each row P V (the output, unless the forward's own is at hand), P K (hence
    E_p[score] = scale q . P K and the entropy lse - E_p[score]) and, for look-back, E_p[j].
    q and k get zero columns to match the value width (the kernel's rule); scores stay."""

    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (q, k, values), every key
    with_v: bool
    look_back: bool


def _fused_inputs(
    qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor | None, usage: str
) -> _Fused:
    """vh None: values start at k (the norms come from the forward's output)."""
    batch, n_h, n_keys, dim = kh.shape
    look_back = usage == "look-back"
    parts = ([] if vh is None else [vh]) + [kh]
    if look_back:
        keys = torch.arange(n_keys, dtype=kh.dtype, device=kh.device)
        parts.append(keys.view(1, 1, -1, 1).expand(batch, n_h, n_keys, 1))
    if len(parts) == 1:
        return _Fused((qh, kh, kh), with_v=False, look_back=False)
    values = torch.cat(parts, dim=-1)
    pad = (0, values.shape[-1] - dim)
    return _Fused((F.pad(qh, pad), F.pad(kh, pad), values), vh is not None, look_back)


def _masked_rows(
    fused: _Fused, rows: torch.Tensor, w: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused pass of `rows` alone over the keys they may see, the window as a mask."""
    q, k, values = fused.inputs
    lo, hi = max(0, int(rows[0]) - w + 1), int(rows[-1]) + 1
    allowed = window_allows(rows.unsqueeze(1), torch.arange(lo, hi, device=rows.device), w)
    mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device)
    mask = mask.masked_fill(~allowed, -math.inf)
    return attention_with_lse(q[:, :, rows], k[:, :, lo:hi], values[:, :, lo:hi], scale, mask=mask)


def _sums(
    qh: torch.Tensor,
    fused: _Fused,
    pv_pk: torch.Tensor,
    lse: torch.Tensor,
    rows: torch.Tensor,
    w: int,
    scale: float,
    norms: torch.Tensor | None,
) -> torch.Tensor:
    """(heads, 3) float64 sums over batch and `rows` (the positions of qh's rows) of entropy,
    output norm (of `norms`, the forward's output, when given) and look-back share (else 0)."""
    dim = qh.shape[-1]
    at = dim if fused.with_v else 0  # where P K starts
    expected_score = scale * torch.linalg.vecdot(qh, pv_pk[..., at : at + dim])
    entropy = (lse.float() - expected_score).clamp_min(0.0)  # >= 0; rounding can dip below
    norm = torch.linalg.vector_norm(pv_pk[..., :dim] if norms is None else norms, dim=-1)
    sums = [t.sum(dim=(0, 2), dtype=torch.float64) for t in (entropy, norm)]
    if fused.look_back:
        reach = (torch.clamp(rows + 1, max=w) - 1).clamp_min(1)
        share = (rows - pv_pk[..., at + dim]) / reach
        sums.append(share.sum(dim=(0, 2), dtype=torch.float64))
    else:
        sums.append(torch.zeros_like(sums[0]))
    return torch.stack(sums, dim=-1)


def _last_key(qh: torch.Tensor, kh: torch.Tensor, w: int, scale: float) -> torch.Tensor:
    """(heads,): sum over batch of the last row's attention weight on itself."""
    t = kh.shape[2]
    scores = torch.matmul(qh[:, :, t - 1 :], kh[:, :, t - w :].transpose(-1, -2)) * scale
    return torch.softmax(scores, dim=-1)[..., -1].sum(dim=(0, 2))
