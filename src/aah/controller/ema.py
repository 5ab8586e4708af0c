"""Exponential moving average of feature tensors: ema = decay * ema + (1 - decay) * new."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class FeatureEMA:
    """EMA of one tensor; the first observation initialises it (no zero bias).

    `enabled=False` (the no-feature-EMA ablation) keeps only the latest observation.
    """

    decay: float = 0.9
    enabled: bool = True
    value: torch.Tensor | None = None

    def update(self, new: torch.Tensor) -> torch.Tensor:
        """Fold in `new` and return the smoothed value (a tensor owned by this object)."""
        new = new.detach().to(torch.float32)
        if not self.enabled or self.value is None or self.value.shape != new.shape:
            self.value = new.clone()
        else:
            self.value = self.decay * self.value + (1.0 - self.decay) * new
        return self.value

    def state_dict(self) -> dict:
        return {"value": None if self.value is None else self.value.clone()}

    def load_state_dict(self, state: dict) -> None:
        value = state["value"]
        self.value = None if value is None else value.detach().clone().to(torch.float32)
