"""`RopeShift`: move a rotary-embedded key (or query) by a number of positions, after the fact.

Rotary embeddings rotate each pair of dimensions of q and k by position x frequency, so a key
stored already rotated for position j becomes the key of position j + d by one more rotation by
d; scores depend on positions only through q's minus k's. A rolling cache
(`aah.model.cache.KVCache` with `shift`) uses it to give its sinks the positions StreamingLLM
assigns within the cache, without storing keys before their rotation: only the sinks move, a
few keys per step, where keys stored unrotated would need every window key rotated every step.

Two pairings exist: "half" (dimension i with i + D/2, transformers' `rotate_half`) and "pairs"
(dimensions 2i and 2i + 1, this package's own `RotaryPosition`). Angles are computed in float64
and the rotation in the tensor's dtype (float32 at least).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

Pairing = Literal["half", "pairs"]


@dataclass(frozen=True)
class RopeShift:
    """Each layer's rotary frequencies (D/2,) and how its dimensions pair up."""

    inv_freq: tuple[torch.Tensor, ...]
    pairing: Pairing = "half"

    @classmethod
    def of(cls, inv_freq: Sequence[torch.Tensor], pairing: Pairing = "half") -> RopeShift:
        """From one frequency vector per layer (copied to float64 on the CPU)."""
        if pairing not in ("half", "pairs"):
            raise ValueError(f"pairing must be 'half' or 'pairs', got {pairing!r}")
        freqs = tuple(f.detach().to("cpu", torch.float64).flatten() for f in inv_freq)
        if not freqs:
            raise ValueError("RopeShift needs one frequency vector per layer, got none")
        return cls(freqs, pairing)

    def head_dim(self, layer: int) -> int:
        """The head dimension the layer's frequencies rotate (2 x their count)."""
        return 2 * self.inv_freq[layer].numel()

    def rotate(self, layer: int, x: torch.Tensor, delta: torch.Tensor | int) -> torch.Tensor:
        """x (..., D) moved by `delta` positions (an int, or a tensor broadcastable to
        x.shape[:-1]; negative moves back): x rotated by delta x each frequency."""
        freq = self.inv_freq[layer]
        if x.shape[-1] != 2 * freq.numel():
            raise ValueError(
                f"layer {layer} rotates {2 * freq.numel()} dimensions, the tensor has {x.shape[-1]}"
            )
        d = torch.as_tensor(delta, dtype=torch.float64)
        angles = d.unsqueeze(-1) * freq  # (..., D/2)
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        cos = angles.cos().to(x.device, work)
        sin = angles.sin().to(x.device, work)
        y = x.to(work)
        if self.pairing == "half":
            a, b = y.chunk(2, dim=-1)
        else:
            a, b = y[..., 0::2], y[..., 1::2]
        ra, rb = a * cos - b * sin, b * cos + a * sin
        out = torch.cat([ra, rb], dim=-1) if self.pairing == "half" else _interleave(ra, rb)
        return out.to(x.dtype)


def _interleave(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(..., D/2) twice -> (..., D) as a0, b0, a1, b1, ..."""
    return torch.stack([a, b], dim=-1).flatten(-2)
