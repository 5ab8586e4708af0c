"""The divergence guard: when a training loss says the run has blown up, and how it stops.

Rule: a step diverged when its training loss is not finite, or exceeds EXPLOSION_FACTOR
times ln(vocab_size) nats, the loss of a uniform guess (about what an untrained model
scores): far above it the weights are no longer learning anything. The loss is checked
before every optimizer step, so a bad step never reaches the weights that are logged; a
checkpoint is written only after its weights pass the same test on the step's last batch
(an update can wreck the weights while the loss it came from was fine), so the checkpoint
on disk is always the last good one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from aah import records
from aah.training import distributed as dist_util

#: how many times a uniform guess's loss counts as an explosion.
EXPLOSION_FACTOR = 10.0


class TrainingDiverged(RuntimeError):
    """Training stopped because the loss diverged; the message is one line for the user."""


def loss_limit(vocab_size: int) -> float:
    """The largest training loss (nats) that is not an explosion."""
    return EXPLOSION_FACTOR * math.log(vocab_size)


def is_diverged(loss: float, limit: float) -> bool:
    return not math.isfinite(loss) or loss > limit


@torch.no_grad()
def probe_loss(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    device: torch.device,
    amp: torch.dtype | None,
) -> float:
    """Loss of the current weights on one batch, without gradients, dropout or RNG draws (so
    the check leaves the run bit-for-bit as it was)."""
    was_training = model.training
    model.eval()
    try:
        with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    finally:
        model.train(was_training)
    return float(loss)


@dataclass
class DivergenceGuard:
    """The guard of one run; its checks are collective (every rank gets the same answer)."""

    limit: float
    info: dist_util.DistInfo
    device: torch.device
    amp: torch.dtype | None
    run_dir: Path

    def loss_diverged(self, loss: float) -> bool:
        return dist_util.any_across(self.info, is_diverged(loss, self.limit), self.device)

    def weights_loss(
        self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor] | None
    ) -> float | None:
        """None when the weights pass the guard on `batch` (None: nothing was trained in this
        invocation, the weights are the checkpoint's), else their loss."""
        if batch is None:
            return None
        loss = probe_loss(model, *batch, self.device, self.amp)
        return loss if self.loss_diverged(loss) else None

    def stop(self, what: str, step: int, loss: float, lr: float, tokens: int, saved_at: int) -> str:
        """Log the diverged step to metrics.jsonl (a non-finite loss is written as null) and
        return the one-line message; `saved_at` is the checkpoint's step (-1: none)."""
        loss = dist_util.mean_across(self.info, loss, self.device)
        if self.info.is_main:
            record = {"step": step, "train_loss": loss, "lr": lr, "tokens": tokens}
            records.append_jsonl(self.run_dir / records.METRICS, {**record, "diverged": True})
        checkpoint = self.run_dir / records.CHECKPOINT
        return diverged_message(step, loss, self.limit, what, checkpoint, saved_at)


def diverged_message(
    step: int, loss: float, limit: float, what: str, checkpoint: Path, saved_at: int
) -> str:
    """One line: where it diverged, the rule, what was kept, what to try."""
    kept = (
        f"the last good checkpoint (step {saved_at}) stays in {checkpoint}"
        if saved_at >= 0
        else "no checkpoint was written"
    )
    return (
        f"training diverged at step {step}: {what} {loss:.4g} (the limit is a finite loss "
        f"<= {limit:.4g} nats, {EXPLOSION_FACTOR:g} x ln(vocab_size)); {kept}; start again "
        f"with a lower train.lr, or train.grad_clip > 0"
    )
