"""Attention that also returns its log-sum-exp, and the matching backward.

Shapes: q (N, Hq, Lq, D); k, v (N, Hkv, Lk, D), Hq % Hkv == 0; lse (N, Hq, Lq); an optional
additive mask broadcastable to (N, Hq, Lq, Lk); `causal` needs Lq == Lk.
On CPU in float32/bfloat16/float16 this is PyTorch's fused flash kernel (GQA native, strided
inputs accepted, nothing materialised). Elsewhere (float64, CUDA) an explicit computation with
the same contract runs; its memory is O(N H Lq Lk), fine for the block sizes it is called with.

The backward takes the *final* output and log-sum-exp of each query row; with those it returns
this call's exact share of the gradient even when the output merged several calls.
"""

from __future__ import annotations

import torch

_FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _fused(q: torch.Tensor) -> bool:
    return q.device.type == "cpu" and q.dtype in _FUSED_DTYPES


def _expand_kv(x: torch.Tensor, n_q_heads: int) -> torch.Tensor:
    group = n_q_heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def _fold_kv(grad: torch.Tensor, n_kv_heads: int) -> torch.Tensor:
    n, hq, length, d = grad.shape
    return grad.reshape(n, n_kv_heads, hq // n_kv_heads, length, d).sum(2)


def _scores(q, k, scale, causal, mask):  # type: ignore[no-untyped-def]
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask
    if causal:
        length = q.shape[-2]
        upper = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(upper, float("-inf"))
    return scores


def attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    *,
    causal: bool = False,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (out, lse); lse is float32 for the fused kernel, q's dtype otherwise."""
    if _fused(q):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, attn_mask=mask, scale=scale
        )
    hq = q.shape[1]
    scores = _scores(q, _expand_kv(k, hq), scale, causal, mask)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), _expand_kv(v, hq))
    return out, lse


def attention_with_lse_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    *,
    causal: bool = False,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of this call given the final output and log-sum-exp."""
    if _fused(q):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=scale
        )
    hq, hkv = q.shape[1], k.shape[1]
    k_full, v_full = _expand_kv(k, hq), _expand_kv(v, hq)
    probs = torch.exp(_scores(q, k_full, scale, causal, mask) - lse.unsqueeze(-1))
    grad_v = torch.matmul(probs.transpose(-1, -2), grad_out)
    grad_p = torch.matmul(grad_out, v_full.transpose(-1, -2))
    row_dot = (grad_out * out).sum(-1, keepdim=True)
    grad_s = probs * (grad_p - row_dot) * scale
    grad_q = torch.matmul(grad_s, k_full)
    grad_k = torch.matmul(grad_s.transpose(-1, -2), q)
    return grad_q, _fold_kv(grad_k, hkv), _fold_kv(grad_v, hkv)
