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
sampled rows as a cheaper estimate. The entropy is computed as lse - E_p[score], which
leaves out the method's 1e-9 inside the log (at most T * 1e-9 per row); in float32 the
difference of two numbers of the size of the scores also costs up to ~1e-8 x max |score|
(1e-6 at scores of 100; more only for degenerate scales).
Option `usage="look-back"`: the share of the reachable context a row uses,
sum_j p_ij (i - j) / max(n_i - 1, 1), averaged over rows (n_i = keys row i may see).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
#: Query rows per block of the exact pass.
ROW_BLOCK = 256
#: Inside the log of the entropy, as the method writes it: -sum p log(p + 1e-9).
ENTROPY_EPS = 1e-9


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
    halves the exact pass: the norms come from it, and the pass carries keys only.
    """
    check_choice("usage", usage, Usage)
    batch, n_q, seq_len, dim = q.shape
    if len(windows) != n_q:
        raise ValueError(f"expected one window per query head ({n_q}), got {len(windows)}")
    if out is not None and out.shape != q.shape:
        raise ValueError(f"out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    reuse = out is not None and rows is None and usage == "last-key"
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
            vh = None if reuse else _heads(v, kv)
            if reuse:
                sums = _key_pass_sums(qh, kh, _heads(out, heads), w, scale)  # type: ignore[arg-type]
            elif rows is None:
                sums = _exact_sums(qh, kh, vh, w, scale, usage)
            else:
                sums = torch.zeros(len(heads), 3, dtype=torch.float64)
                for chunk in torch.split(pos, ROW_BLOCK):
                    sums += _row_sums(qh, kh, vh, chunk.to(q.device), w, scale, usage)
            stats[heads] = sums / (batch * pos.numel())
            if usage == "last-key":
                stats[heads, 2] = _last_key(qh, kh, w, scale).double() / (batch * seq_len)
    stats[:, 0] /= max(1.0, math.log(seq_len))
    return stats.float()


def _exact_sums(qh, kh, vh, w: int, scale: float, usage: str) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """(heads, 3) float64 sums over batch and every row: entropy, norm, look-back share.

    One windowed pass of the fused kernel over values [v | k (| position)]: a row's entropy is
    lse - E_p[s] with E_p[s] = scale q . (P K), its look-back i - E_p[j]. Queries and keys get
    zero columns to match the value width (the kernel's rule); scores do not change.
    """
    batch, n_h, seq_len, dim = qh.shape
    position = torch.arange(seq_len, dtype=qh.dtype, device=qh.device)
    values = [vh, kh]
    if usage == "look-back":
        values.append(position.view(1, 1, -1, 1).expand(batch, n_h, seq_len, 1))
    values = torch.cat(values, dim=-1)
    pad = (0, values.shape[-1] - dim)
    qp, kp = F.pad(qh, pad), F.pad(kh, pad)
    if w >= seq_len:
        out, lse = attention_with_lse(qp, kp, values, scale, causal=True)
    else:
        out, lse = forward_with_lse(qp, kp, values, (w,) * n_h, scale)
    expected_score = scale * torch.linalg.vecdot(qh, out[..., dim : 2 * dim])
    entropy = (lse.float() - expected_score).clamp_min(0.0)  # >= 0; rounding can dip below
    norm = out[..., :dim].norm(dim=-1)
    sums = [entropy.double().sum(dim=(0, 2)), norm.double().sum(dim=(0, 2))]
    if usage == "look-back":
        reach = (torch.clamp(position + 1, max=w) - 1).clamp_min(1)
        share = (position - out[..., 2 * dim]) / reach
        sums.append(share.double().sum(dim=(0, 2)))
    else:
        sums.append(torch.zeros_like(sums[0]))
    return torch.stack(sums, dim=-1)


def _key_pass_sums(qh, kh, out_h, w: int, scale: float) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """(heads, 3) float64 sums over batch and every row: entropy, norm of `out_h`, zero.

    One windowed pass of the fused kernel with the keys as values gives each row's lse and
    P K, hence its entropy lse - scale q . (P K); `out_h` is the forward's own P V.
    """
    n_h, seq_len = qh.shape[1], qh.shape[2]
    if w >= seq_len:
        pk, lse = attention_with_lse(qh, kh, kh, scale, causal=True)
    else:
        pk, lse = forward_with_lse(qh, kh, kh, (w,) * n_h, scale)
    entropy = (lse.float() - scale * torch.linalg.vecdot(qh, pk)).clamp_min(0.0)
    norm = torch.linalg.vector_norm(out_h, dim=-1)
    sums = [t.sum(dim=(0, 2), dtype=torch.float64) for t in (entropy, norm)]
    return torch.stack([*sums, torch.zeros_like(sums[0])], dim=-1)


def _row_sums(qh, kh, vh, pos: torch.Tensor, w: int, scale: float, usage: str) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """(heads, 3) float64 sums over batch and the rows `pos` of entropy, norm, look-back."""
    lo, hi = max(0, int(pos[0]) - w + 1), int(pos[-1]) + 1
    keys = torch.arange(lo, hi, device=pos.device)
    back = pos.unsqueeze(1) - keys  # (S, L): how far key j lies behind row i
    allowed = window_allows(pos.unsqueeze(1), keys, w)
    scores = torch.matmul(qh[:, :, pos], kh[:, :, lo:hi].transpose(-1, -2)) * scale
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    entropy = -(p * (p + ENTROPY_EPS).log()).sum(dim=-1)
    norm = torch.matmul(p, vh[:, :, lo:hi]).norm(dim=-1)
    sums = [entropy.double().sum(dim=(0, 2)), norm.double().sum(dim=(0, 2))]
    if usage == "look-back":
        reach = (torch.clamp(pos + 1, max=w) - 1).clamp_min(1).to(p.dtype)
        share = (p * back.to(p.dtype)).sum(dim=-1)
        sums.append((share / reach).double().sum(dim=(0, 2)))
    else:
        sums.append(torch.zeros_like(sums[0]))
    return torch.stack(sums, dim=-1)


def _last_key(qh, kh, w: int, scale: float) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """(heads,): sum over batch of the last row's attention weight on itself."""
    t = kh.shape[2]
    scores = torch.matmul(qh[:, :, t - 1 :], kh[:, :, t - w :].transpose(-1, -2)) * scale
    return torch.softmax(scores, dim=-1)[..., -1].sum(dim=(0, 2))
