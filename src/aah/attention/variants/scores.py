"""Score functions: scaled dot product (the engine), bilinear q^T W k, additive (Bahdanau).

All three honour per-head windows exactly, accept GQA/MQA, and add an optional score bias
(ALiBi, relative) inside the windowed computation.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from aah.attention.api import windowed_attention
from aah.attention.variants.base import Variant, Windows, expand_kv, plan_mask
from aah.attention.variants.biased import grouped_biased_attention
from aah.attention.variants.score_bias import ScoreBias


class SoftmaxAttention(Variant):
    """softmax(q k^T / sqrt(D) + bias) v. Without a bias this IS the engine
    (`windowed_attention`, any backend); with one, the banded biased path."""

    name = "softmax"

    def __init__(
        self,
        n_head: int,
        n_kv_head: int,
        head_dim: int,
        *,
        bias: ScoreBias | None = None,
        backend: str = "auto",
    ) -> None:
        super().__init__(n_head, n_kv_head, head_dim)
        self.bias = bias
        self.backend = backend

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: tuple[int, ...]
    ) -> torch.Tensor:
        if self.bias is None:
            return windowed_attention(q, k, v, plan, backend=self.backend, scale=self.scale)
        return grouped_biased_attention(q, k, v, plan, self.bias, self.scale)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: Windows = None
    ) -> torch.Tensor:
        return self.attend(q, k, v, self.plan(q, k, v, windows))


class BilinearAttention(SoftmaxAttention):
    """Scores q^T W_h k / sqrt(D) with a learned (D, D) W per query head, initialised to the
    identity. Computed as (q W_h) k^T so the fused engine runs unchanged: windows, GQA and
    biases compose for free."""

    name = "bilinear"

    def __init__(self, n_head: int, n_kv_head: int, head_dim: int, **kw: object) -> None:
        super().__init__(n_head, n_kv_head, head_dim, **kw)  # type: ignore[arg-type]
        self.weight = nn.Parameter(torch.eye(head_dim).repeat(n_head, 1, 1))  # (Hq, D, D)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: Windows = None
    ) -> torch.Tensor:
        plan = self.plan(q, k, v, windows)
        return self.attend(torch.matmul(q, self.weight.to(q.dtype).unsqueeze(0)), k, v, plan)


class AdditiveAttention(Variant):
    """Bahdanau scores s_h(i, j) = u_h^T tanh(A_h q_i + C_h k_j) (+ bias), per query head,
    with a hidden width D' (`hidden`, default D / 2).

    Memory: the tanh term is (B, H, Tq, T, D'). Query chunks of `chunk` rows are recomputed in
    the backward (checkpointing), so the peak is O(B H chunk T D') transient plus O(B H T^2)
    scores: fine for T up to ~1-2k on CPU, heavy beyond (4096 at H=8 needs ~2 GB of scores
    and probabilities and ~30x the work of dot-product scores).
    """

    name = "additive"

    def __init__(
        self,
        n_head: int,
        n_kv_head: int,
        head_dim: int,
        *,
        hidden: int | None = None,
        chunk: int = 128,
        bias: ScoreBias | None = None,
    ) -> None:
        super().__init__(n_head, n_kv_head, head_dim)
        hidden = hidden or max(1, head_dim // 2)
        self.chunk, self.bias = chunk, bias
        gen = torch.Generator().manual_seed(0)
        std = head_dim**-0.5
        self.w_query = nn.Parameter(torch.randn(n_head, head_dim, hidden, generator=gen) * std)
        self.w_key = nn.Parameter(torch.randn(n_head, head_dim, hidden, generator=gen) * std)
        self.u = nn.Parameter(torch.randn(n_head, hidden, generator=gen) * hidden**-0.5)

    @staticmethod
    def _scores(qa: torch.Tensor, ka: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        # (B, H, c, 1, D') + (B, H, 1, T, D') -> (B, H, c, T)
        return torch.tanh(qa.unsqueeze(3) + ka.unsqueeze(2)) @ u.view(1, -1, 1, u.shape[-1], 1)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: Windows = None
    ) -> torch.Tensor:
        plan = self.plan(q, k, v, windows)
        seq_len = q.shape[2]
        qa = q @ self.w_query.to(q.dtype)  # (B, H, T, D')
        ka = expand_kv(k, self.n_head) @ self.w_key.to(q.dtype)
        u = self.u.to(q.dtype)
        parts = []
        for start in range(0, seq_len, self.chunk):
            qc = qa[:, :, start : start + self.chunk]
            if torch.is_grad_enabled() and qc.requires_grad:
                part = checkpoint(self._scores, qc, ka, u, use_reentrant=False)
            else:
                part = self._scores(qc, ka, u)
            parts.append(part.squeeze(-1))
        scores = torch.cat(parts, dim=2)  # (B, H, T, T)
        pos = torch.arange(seq_len, device=q.device)
        if self.bias is not None:
            scores = scores + self.bias(pos[:, None] - pos[None, :]).to(q.dtype)
        allowed = plan_mask(plan, seq_len, q.device)
        probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        return probs @ expand_kv(v, self.n_head)
