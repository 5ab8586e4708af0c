"""`Sampling`: how the next token is chosen from logits (temperature, top-k, top-p, seed).

Shapes: B batch, V vocab.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aah.validate import check_int, check_real


@dataclass(frozen=True)
class Sampling:
    """temperature 0 is greedy (argmax); otherwise logits / temperature, optionally restricted
    to the top_k tokens and/or the smallest set holding top_p of the mass, are sampled with a
    `torch.Generator` seeded by `seed` (None: torch's global generator).

    Raises:
        ValueError: temperature < 0 or not finite, top_k < 1, top_p outside (0, 1], or a
            seed that is not an int; the message names the value.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        check_real("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if self.top_k is not None:
            check_int("top_k", self.top_k, 1)
        if self.top_p is not None:
            check_real("top_p", self.top_p)
            if not 0.0 < self.top_p <= 1.0:
                raise ValueError(f"top_p must be in (0, 1] or None, got {self.top_p!r}")
        if self.seed is not None:
            check_int("seed", self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def generator(self, device: torch.device) -> torch.Generator | None:
        """A generator seeded by `seed` on device (None: unseeded, or greedy needs none)."""
        if self.seed is None or self.greedy:
            return None
        return torch.Generator(device=device).manual_seed(self.seed)


GREEDY = Sampling(temperature=0)


def sample(
    logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Next token per row (B,) from logits (B, V), chosen as `sampling` says."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    logits = logits.float() / sampling.temperature
    top_k, top_p = sampling.top_k, sampling.top_p
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token once the mass before it already reaches top_p (the first always stays).
        drop = (cum - sorted_logits.softmax(dim=-1)) >= top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]
