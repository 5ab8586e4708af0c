"""`TrainState`: everything one training run holds, shared by the loop, the checkpoint and
the metrics; `build_state` makes a fresh one with the seeding every run starts from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from aah.controller import Policy, make_policy
from aah.controller.options import AblationOptions
from aah.controller.protocol import ProbesLoss
from aah.data import BatchLoader, TokenSplits
from aah.data.loader import spread_windows
from aah.eval.cut_probe import CutProbe
from aah.model import GPT
from aah.training.config import TrainConfig
from aah.training.distributed import DistInfo
from aah.training.run_config import RunConfig


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


@dataclass
class TrainState:
    """The live objects of a run, its counters, and where and on which rank it runs."""

    config: RunConfig
    model: GPT
    optimizer: torch.optim.Optimizer
    policy: Policy
    loader: BatchLoader
    info: DistInfo
    device: torch.device
    run_dir: Path
    data_fingerprint: str  # content hash of the token splits (aah.training.fingerprint)
    wall_start: float  # time.perf_counter() when this invocation started
    counters: Counters = field(default_factory=Counters)

    @property
    def step_tokens(self) -> int:
        """Tokens one optimizer step trains on, over every rank."""
        cfg = self.config.train
        return cfg.batch_size * self.config.seq_len * cfg.grad_accum * self.info.world_size


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; matrices (and embeddings) decay, vectors such as norm gains do not."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=False)


def build_state(
    config: RunConfig,
    splits: TokenSplits,
    info: DistInfo,
    device: torch.device,
    run_dir: Path,
    wall_start: float,
) -> TrainState:
    """A step-0 state. The weights come from `train.seed`; afterwards the global RNG is
    reseeded per rank for training-time randomness (dropout), as every run and resume does."""
    cfg, mc = config.train, config.model
    torch.manual_seed(cfg.seed)
    model = GPT(mc).to(device)
    policy = make_policy(
        config.controller,
        n_layer=mc.n_layer,
        n_head=mc.n_head,
        n_kv_head=mc.n_kv_head,
        seq_len=config.seq_len,
    )
    model.set_window_plan(policy.initial_plan())
    if isinstance(policy, ProbesLoss):  # loss-ablation: calibration windows of the train split
        n_calib = config.controller.options_as(AblationOptions).ablation_windows
        calib = spread_windows(splits.train, config.seq_len, n_calib)
        policy.attach_probe(CutProbe(model, calib.to(device), cfg.batch_size))
    optimizer = build_optimizer(model, cfg)
    loader = BatchLoader(
        splits.train,
        cfg.batch_size,
        config.seq_len,
        seed=cfg.seed,
        rank=info.rank,
        world_size=info.world_size,
    )
    torch.manual_seed(cfg.seed + 1 + info.rank)
    return TrainState(
        config, model, optimizer, policy, loader, info, device, run_dir,
        splits.content_hash, wall_start,
    )  # fmt: skip
