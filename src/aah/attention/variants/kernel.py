"""Causal linear (kernel) attention with positive feature maps, chunked prefix sums.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D); features phi(.) (.., F).
out_i = phi(q_i)^T S_i / phi(q_i)^T z_i with S_i = sum_{j <= i} phi(k_j) v_j^T (F, D) and
z_i = sum_{j <= i} phi(k_j). The sequence is cut into chunks of C: inside a chunk the (C, C)
causal products are explicit; across chunks S and z are exclusive prefix sums (cumsum over
chunks) of the per-chunk phi(K)^T V, so memory is O(B H (T/C) F D + B H T C), never T x T.

Feature maps: `elu` (elu(x) + 1, F = D) and `favor` (FAVOR+ positive orthogonal random
features, F = n_features, approximating exp(q.k / sqrt(D)); seeded and redrawable). FAVOR+
features are bounded above by exp(|w|^2 / 2) (complete the square), so keys need no
stabiliser; each query row is shifted by its own max, which cancels in the ratio.

Windows: not honoured (the prefix sums have no notion of distance): a plan narrower than T
raises. Score biases: not supported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aah.attention.variants.base import Variant, Windows, expand_kv

FEATURE_MAPS = ("elu", "favor")


def orthogonal_features(n_features: int, dim: int, seed: int) -> torch.Tensor:
    """(M, D) rows: blocks of orthogonal directions with chi-distributed norms (Performer)."""
    gen = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(-(-n_features // dim)):
        q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
        blocks.append(q.T)
    directions = torch.cat(blocks)[:n_features]
    norms = torch.randn(n_features, dim, generator=gen, dtype=torch.float64).norm(dim=1)
    return (directions * norms[:, None]).float()


def _exclusive_cumsum(x: torch.Tensor) -> torch.Tensor:
    """Sum over chunks strictly before each chunk (dim 2); shifting avoids cumsum - x
    cancellation."""
    total = x.cumsum(2)
    return torch.cat([torch.zeros_like(total[:, :, :1]), total[:, :, :-1]], dim=2)


class KernelAttention(Variant):
    """Linear attention; `feature_map` "elu" or "favor" (`n_features`, `seed`), `chunk` C."""

    name = "kernel"
    supports_windows = False

    def __init__(
        self,
        n_head: int,
        n_kv_head: int,
        head_dim: int,
        *,
        feature_map: str = "elu",
        n_features: int = 64,
        seed: int = 0,
        chunk: int = 64,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(n_head, n_kv_head, head_dim)
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}")
        if chunk < 1 or n_features < 1:
            raise ValueError(f"kernel needs chunk >= 1, n_features >= 1; got {chunk}, {n_features}")
        self.name = "kernel" if feature_map == "elu" else "kernel-favor"
        self.feature_map, self.chunk, self.eps = feature_map, chunk, eps
        self.n_features = head_dim if feature_map == "elu" else n_features
        self.register_buffer("features", orthogonal_features(n_features, head_dim, seed))

    def redraw(self, seed: int) -> None:
        """Draw new FAVOR+ random features (e.g. every N steps), reproducibly from `seed`."""
        self.features.copy_(orthogonal_features(self.features.shape[0], self.head_dim, seed))

    def phi(self, x: torch.Tensor, is_query: bool) -> torch.Tensor:
        """Positive features (.., F) of x (.., D)."""
        if self.feature_map == "elu":
            return F.elu(x) + 1.0
        x = x * self.head_dim**-0.25
        proj = x @ self.features.to(x.dtype).T - 0.5 * (x * x).sum(-1, keepdim=True)
        if is_query:
            proj = proj - proj.amax(-1, keepdim=True).detach()
        return torch.exp(proj) * self.features.shape[0] ** -0.5

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: Windows = None
    ) -> torch.Tensor:
        self.plan(q, k, v, windows)
        batch, hq, seq_len, dim = q.shape
        c = min(self.chunk, seq_len)
        n = -(-seq_len // c)
        pad = n * c - seq_len  # padded rows sit after every real query; dropped at the end
        fq = F.pad(self.phi(q, True), (0, 0, 0, pad)).unflatten(2, (n, c))  # (B, H, n, C, F)
        fk = F.pad(expand_kv(self.phi(k, False), hq), (0, 0, 0, pad)).unflatten(2, (n, c))
        vc = F.pad(expand_kv(v, hq), (0, 0, 0, pad)).unflatten(2, (n, c))  # (B, H, n, C, D)
        # Inside chunks: explicit causal (C, C) kernel products.
        local = (fq @ fk.transpose(-1, -2)).tril()
        num = local @ vc
        den = local.sum(-1)
        # Across chunks: exclusive prefix sums of phi(K)^T V and phi(K).
        state = _exclusive_cumsum(fk.transpose(-1, -2) @ vc)  # (B, H, n, F, D)
        z_prev = _exclusive_cumsum(fk.sum(3))  # (B, H, n, F)
        num = num + fq @ state
        den = den + (fq @ z_prev.unsqueeze(-1)).squeeze(-1)
        out = num / den.clamp_min(self.eps).unsqueeze(-1)
        return out.reshape(batch, hq, n * c, dim)[:, :, :seq_len]
