"""Everything one training run holds, and how it goes into and comes out of a checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from aah.data import BatchLoader
from aah.model import GPT
from aah.train import fingerprint
from aah.train.checkpoint import FORMAT, rng_state, set_rng_state
from aah.train.config import TrainConfig
from aah.train.distributed import DistInfo, gather_objects
from aah.train.run_config import RunConfig


@dataclass
class Counters:
    """Running totals that must survive a resume for the metrics to continue exactly."""

    step: int = 0
    tokens: int = 0
    loss_sum: float = 0.0
    loss_count: int = 0
    train_seconds: float = 0.0
    ctrl_seconds: float = 0.0
    ctrl_updates: int = 0
    wall_seconds: float = 0.0  # wall time of earlier invocations, as of the checkpoint


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; matrices (and embeddings) decay, vectors such as norm gains do not."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=False)


def checkpoint_payload(
    config: RunConfig,
    model: GPT,
    optimizer: torch.optim.Optimizer,
    policy: Any,
    loader: BatchLoader,
    counters: Counters,
    info: DistInfo,
    data_fingerprint: str,
) -> dict[str, Any] | None:
    """The checkpoint dict on rank 0 (None elsewhere); collective: every rank must call it."""
    per_rank = gather_objects(info, {"rng": rng_state(), "data": loader.state_dict()})
    if not info.is_main:
        return None
    return {
        "format": FORMAT,
        "step": counters.step,
        "config": config.to_dict(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "plan": model.window_plan(),
        "controller": policy.state_dict(),
        "counters": asdict(counters),
        "world_size": info.world_size,
        "ranks": per_rank,
        fingerprint.KEY: data_fingerprint,
    }


def restore(
    payload: dict[str, Any],
    model: GPT,
    optimizer: torch.optim.Optimizer,
    policy: Any,
    loader: BatchLoader,
    info: DistInfo,
) -> Counters:
    """Put a checkpoint back into live objects; ValueError if the world size changed."""
    if payload["world_size"] != info.world_size:
        raise ValueError(
            f"checkpoint was written with world_size {payload['world_size']}, this run has "
            f"{info.world_size}: resume with the same number of processes"
        )
    model.load_state_dict(payload["model"])
    model.set_window_plan(payload["plan"])
    optimizer.load_state_dict(payload["optimizer"])
    policy.load_state_dict(payload["controller"])
    mine = payload["ranks"][info.rank]
    loader.load_state_dict(mine["data"])
    set_rng_state(mine["rng"])
    return Counters(**payload["counters"])
