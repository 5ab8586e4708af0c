"""Positions that act on scores: additive biases b_h(i - j) per query head.

`rope`, `learned` and `none` act on q/k or on the input embedding (the model's
`aah.model.positions`), so they need nothing here; `alibi` and `relative` are score biases that
the attention variants consult. A bias depends only on the distance i - j >= 0, which is why it
composes exactly with a window plan: inside any window, tile or block the bias is a function
of a (query, key) offset that the caller already knows.
"""

from __future__ import annotations

import math
from typing import get_args

import torch
from torch import nn

from aah.choices import Position, ScoreBiasPosition

#: Every position scheme the variants understand; the score biases are applied here.
POSITIONS: tuple[str, ...] = get_args(Position)
SCORE_BIASES: tuple[str, ...] = get_args(ScoreBiasPosition)


class ScoreBias(nn.Module):
    """`forward(distance)` maps an int tensor of distances i - j (any shape S) to (H, *S).

    Negative distances (future keys) are clamped to 0: they are masked by every caller.
    """

    n_head: int

    def forward(self, distance: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


def alibi_slopes(n_head: int) -> torch.Tensor:
    """The ALiBi paper's geometric slopes: 2^(-8/n), 2^(-16/n), ... for n a power of two;
    otherwise the power-of-two set below n plus every other slope of the set for 2n."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_head & (n_head - 1) == 0:
        return torch.tensor(power_of_two(n_head), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(n_head))
    extra = power_of_two(2 * closest)[0::2][: n_head - closest]
    return torch.tensor(power_of_two(closest) + extra, dtype=torch.float64)


class ALiBi(ScoreBias):
    """b_h(i - j) = -slope_h * (i - j); slopes fixed (a buffer), geometric by default."""

    def __init__(self, n_head: int, slopes: torch.Tensor | None = None) -> None:
        super().__init__()
        self.n_head = n_head
        slopes = alibi_slopes(n_head) if slopes is None else torch.as_tensor(slopes)
        if slopes.shape != (n_head,):
            raise ValueError(f"alibi slopes must have shape ({n_head},), got {tuple(slopes.shape)}")
        self.register_buffer("slopes", slopes.float(), persistent=False)

    def forward(self, distance: torch.Tensor) -> torch.Tensor:
        d = distance.clamp(min=0).to(self.slopes.dtype)
        return -self.slopes.view(-1, *([1] * d.dim())) * d


def t5_bucket(distance: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's causal (unidirectional) bucket of a distance >= 0: exact below num_buckets / 2,
    logarithmic up to max_distance, the last bucket beyond."""
    d = distance.clamp(min=0)
    exact = num_buckets // 2
    log_ratio = torch.log(d.clamp(min=1).double() / exact) / math.log(max_distance / exact)
    far = (exact + log_ratio * (num_buckets - exact)).long().clamp(max=num_buckets - 1)
    return torch.where(d < exact, d, far)


class RelativeBias(ScoreBias):
    """T5-style learned bias: one scalar per (bucket of i - j, head); starts at zero."""

    def __init__(self, n_head: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        if num_buckets < 2 or max_distance <= num_buckets // 2:
            raise ValueError(
                f"relative bias needs num_buckets >= 2 and max_distance > num_buckets / 2, "
                f"got {num_buckets} and {max_distance}"
            )
        self.n_head, self.num_buckets, self.max_distance = n_head, num_buckets, max_distance
        self.table = nn.Parameter(torch.zeros(num_buckets, n_head))

    def forward(self, distance: torch.Tensor) -> torch.Tensor:
        bucket = t5_bucket(distance, self.num_buckets, self.max_distance)
        return self.table[bucket].movedim(-1, 0)  # (*S, H) -> (H, *S)


def make_score_bias(position: str, n_head: int, **options: object) -> ScoreBias | None:
    """The score bias of `position`, or None for schemes that act outside the scores."""
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")
    if position == "alibi":
        return ALiBi(n_head, options.get("alibi_slopes"))  # type: ignore[arg-type]
    if position == "relative":
        return RelativeBias(
            n_head,
            int(options.get("num_buckets", 32)),  # type: ignore[call-overload]
            int(options.get("max_distance", 128)),  # type: ignore[call-overload]
        )
    return None
