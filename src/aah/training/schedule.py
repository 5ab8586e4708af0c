"""Learning-rate schedule: linear warm-up, then cosine decay to a floor. A pure function of step."""

from __future__ import annotations

import math

from aah.training.config import TrainConfig


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """LR for the optimizer step that starts with `step` steps already completed."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    horizon = cfg.decay_steps or cfg.max_steps
    span = max(1, horizon - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)
